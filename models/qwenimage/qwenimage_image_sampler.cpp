#include "models/qwenimage/qwenimage_image_sampler.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "engine/autograd/grad_mode.h"
#include "engine/data/captions.h"
#include "models/text/stored_prompts.h"
#include "models/vae/image_vae.h"
#include "runtime/error.h"
#include "runtime/ops/join.h"
#include "runtime/ops/reduce.h"

namespace wick::qwenimage {

using text::prompt_text;
namespace {

const SamplerFile kVae{.label = "the VAE",
                       .key = "vae_path",
                       .hint = "qwen_image_vae.safetensors, a diffusers vae/ folder or a pipeline folder",
                       .pipeline_parts = {"vae"}};
const std::vector<SamplerFile>& text_files() {
  static const std::vector<SamplerFile> files = {
      {.label = "Qwen2.5-VL",
       .key = "text_encoder_path",
       .hint = "qwen_2.5_vl_7b.safetensors or a text_encoder/ folder",
       .pipeline_parts = {"text_encoder"}},
      {.label = "the Qwen2.5-VL tokenizer",
       .key = "tokenizer_path",
       .hint = "a tokenizer/ folder or its tokenizer.json",
       .pipeline_parts = {"tokenizer"}},
  };
  return files;
}

std::vector<std::pair<SamplerFile, std::string>> text_paths(const QwenImageSamplingFiles& f) {
  const std::vector<SamplerFile>& files = text_files();
  return {{files[0], f.text_encoder}, {files[1], f.tokenizer}};
}

// Qwen2.5-VL and its tokenizer, unless stored prompts are given and a text part is not.
std::optional<QwenImageTextEncoder> open_encoder(const QwenImageSamplerSetup& setup) {
  const QwenImageSamplingFiles& f = setup.files;
  if (setup.stored_prompts && (f.text_encoder.empty() || f.tokenizer.empty())) return std::nullopt;
  return QwenImageTextEncoder::from_files(f.text_encoder, f.tokenizer,
                                          {.device = setup.device, .keep_loaded = setup.keep_loaded});
}

LatentSamplerSetup latent_setup(const QwenImageSamplerSetup& setup) {
  LatentSamplerSetup out =
      latent_setup_of(setup, "Qwen-Image", {setup.normalization, "qwenimage"}, text_paths(setup.files));
  out.open_vae = &vae::open_wan_image_vae;
  return out;
}

// The rows [N, L, ...] cut to the longest row the mask [N, L] marks (at least one).
int64_t used_rows(const Tensor& mask) {
  const std::vector<int64_t> m = mask.to(DType::I64).to(Device::cpu()).contiguous().to_vector<int64_t>();
  const int64_t length = mask.size(1);
  int64_t used = 1;
  for (size_t i = 0; i < m.size(); ++i)
    if (m[i] != 0) used = std::max(used, static_cast<int64_t>(i) % length + 1);
  return used;
}

}  // namespace

QwenImageSamplingFiles sampling_files(const ModelConfig& model) {
  std::vector<SamplerFile> files = text_files();
  files.push_back(kVae);
  std::string pipeline;
  std::map<std::string, std::string> paths = resolve_sampler_files(model, files, &pipeline);
  return {.vae = paths["vae_path"],
          .text_encoder = paths["text_encoder_path"],
          .tokenizer = paths["tokenizer_path"],
          .pipeline = pipeline};
}

QwenImageSchedule pipeline_schedule(const std::string& pipeline) {
  QwenImageSchedule schedule;
  if (pipeline.empty()) return schedule;
  const std::filesystem::path path = std::filesystem::path(pipeline) / "scheduler" / "scheduler_config.json";
  std::ifstream in(path);
  if (!in) return schedule;
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  WICK_CHECK_KIND(Data, j.is_object(), path.string(), ": not a JSON object");
  try {
    schedule.base_image_seq_len = j.value("base_image_seq_len", schedule.base_image_seq_len);
    schedule.max_image_seq_len = j.value("max_image_seq_len", schedule.max_image_seq_len);
    schedule.base_shift = j.value("base_shift", schedule.base_shift);
    schedule.max_shift = j.value("max_shift", schedule.max_shift);
    if (j.contains("shift_terminal"))
      schedule.shift_terminal = j.at("shift_terminal").is_null() ? 0.0 : j.at("shift_terminal").get<double>();
  } catch (const nlohmann::json::exception& e) {
    WICK_FAIL(Data, path.string(), ": ", e.what());
  }
  return schedule;
}

// ---- QwenImageImageSampler ----

QwenImageImageSampler::QwenImageImageSampler(QwenImageSamplerSetup setup)
    : LatentImageSampler(latent_setup(setup)), qwen_(std::move(setup)), encoder_(open_encoder(qwen_)) {
  WICK_CHECK_KIND(Config, qwen_.max_length >= 1 && qwen_.max_length <= 1024,
                  "Qwen-Image sampler: max_length must be 1 to 1024, got ", qwen_.max_length);
}

void QwenImageImageSampler::check_fits(const QwenImageTransformer& model) const {
  const QwenImageConfig& c = model.config();
  WICK_CHECK_KIND(Config, c.out_channels == vae_sizes().z_channels, "the Qwen-Image model takes ", c.out_channels,
                  "-channel latents but the VAE ", qwen_.files.vae, " has ", vae_sizes().z_channels);
  if (encoder_)
    WICK_CHECK_KIND(Config, c.text_dim == encoder_->qwen25.config().hidden_size, "the Qwen-Image model takes ",
                    c.text_dim, "-wide text rows (txt_in) but Qwen2.5-VL ", qwen_.files.text_encoder, " is ",
                    encoder_->qwen25.config().hidden_size, " wide");
  check_stored_widths(c.text_dim, "text rows (txt_in)", 0, "pooled vector (none)");
}

LatentImageSampler::SizeRule QwenImageImageSampler::size_rule(DiffusionModel& model) const {
  auto* qwen = dynamic_cast<QwenImageTransformer*>(&model);
  WICK_CHECK_KIND(Config, qwen != nullptr, "the Qwen-Image sampler needs a Qwen-Image model, got ", model.summary());
  return {.latent_multiple = qwen->config().patch_size, .why = "the 2 x 2 patches"};
}

Tensor QwenImageImageSampler::sample(DiffusionModel& model, const std::vector<std::string>& prompts,
                                     const Tensor& noise, const SampleSettings& settings) {
  return generate_from_noise(dynamic_cast<QwenImageTransformer&>(model), prompts, noise, settings);
}

Tensor QwenImageImageSampler::generate_from_noise(QwenImageTransformer& model, const std::vector<std::string>& prompts,
                                                  const Tensor& noise, const SampleSettings& settings) {
  const auto n = static_cast<int64_t>(prompts.size());
  const int64_t channels = vae_sizes().z_channels;
  WICK_CHECK(noise.dim() == 4 && noise.size(0) == n && noise.size(1) == channels && noise.size(2) % 2 == 0 &&
                 noise.size(3) % 2 == 0,
             "Qwen-Image sampler: noise must be [", n, ", ", channels, ", h, w] with h and w even, got ",
             noise.describe());
  WICK_CHECK_KIND(Config, settings.steps >= 1, "Qwen-Image sampler: steps must be >= 1, got ", settings.steps);
  WICK_CHECK_KIND(Config, settings.guidance >= 0, "Qwen-Image sampler: guidance must be >= 0, got ",
                  settings.guidance);
  check_fits(model);
  model.check_latent_size(noise.size(2), noise.size(3));
  autograd::NoGradGuard no_grad;

  // The prompts' rows, then the negative prompt's (one row, used for every image) with true CFG.
  const bool guided = settings.guidance > 1.0;
  std::vector<std::string> texts = texts_of(prompts);
  const std::string negative = prompt_text(qwen_.negative_prompt, qwen_.trigger_word);
  if (guided) texts.push_back(negative);
  const int64_t max_length = qwen_.max_length;
  std::string length_note;
  if (stored() && stored()->embeds.size(1) != max_length)
    length_note = ", made with max_length " + std::to_string(stored()->embeds.size(1)) + ", not " +
                  std::to_string(max_length);
  auto [context, pooled, mask] = embed(
      texts, [max_length](int64_t stored_length) { return stored_length == max_length; },
      [&](const std::vector<std::string>& to_encode) {
        return encode_qwenimage_prompts(*encoder_, to_encode, {.max_length = max_length});
      },
      negative, length_note);
  const int64_t rows = used_rows(mask);
  context = context.narrow(1, 0, rows).contiguous();
  mask = mask.narrow(1, 0, rows).contiguous();

  const QwenImageSampling sampling{.steps = settings.steps,
                                   .true_cfg_scale = guided ? settings.guidance : 1.0,
                                   .schedule = qwen_.schedule};
  std::vector<Tensor> latents;
  for (int64_t first = 0; first < n; first += kSampleBatch) {
    const int64_t count = std::min(kSampleBatch, n - first);
    QwenImageText text{.prompts = {.context = context.narrow(0, first, count),
                                   .context_mask = mask.narrow(0, first, count)}};
    if (guided) text.negative = {.context = context.narrow(0, n, 1), .context_mask = mask.narrow(0, n, 1)};
    latents.push_back(qwenimage_denoise(model, text, noise.narrow(0, first, count), sampling));
  }
  return decode(latents.size() == 1 ? latents.front() : concat(latents, 0));
}

std::string QwenImageImageSampler::describe_text() const {
  return encoder_ ? ", Qwen2.5-VL " + encoder_->qwen25.source_path() : std::string();
}

std::string QwenImageImageSampler::describe_choices() const {
  char schedule[96];
  std::snprintf(schedule, sizeof(schedule), ", shift mu %g..%g over %lld..%lld tokens, terminal %g",
                qwen_.schedule.base_shift, qwen_.schedule.max_shift,
                static_cast<long long>(qwen_.schedule.base_image_seq_len),
                static_cast<long long>(qwen_.schedule.max_image_seq_len), qwen_.schedule.shift_terminal);
  return ", max_length " + std::to_string(qwen_.max_length) + schedule + ", negative prompt \"" +
         prompt_text(qwen_.negative_prompt, qwen_.trigger_word) + "\"";
}

// ---- for a run ----

std::unique_ptr<ImageSampler> make_qwenimage_sampler(const SamplerRequest& request) {
  const ModelConfig& model = request.config.model;
  const LatentDataset& dataset = request.dataset;
  const SamplerKind asked = request.config.sample.sampler;
  WICK_CHECK_KIND(Config, asked == SamplerKind::Auto || asked == SamplerKind::Euler, "sample.sampler: ",
                  sampler_name(asked), " does not fit Qwen-Image, a rectified-flow model (use euler or auto)");
  const QwenImageSamplingFiles files = sampling_files(model);

  // The caption length: what the dataset's embeddings were made with, else model.max_length.
  const LatentDatasetAttributes& data = dataset.attributes();
  const bool qwen_text = data.text_embeds_encoder == kTextEmbedsEncoder;
  const int64_t max_length =
      qwen_text && data.text_max_length > 0 ? data.text_max_length : model.options.get_int("max_length");

  std::optional<SamplePrompts> stored = stored_prompts_for(dataset, qwen_text);
  if (stored && stored->embeds.size(1) != max_length) stored.reset();
  const bool guided = request.config.sample.guidance > 1.0;
  const std::vector<std::string> not_stored = text::texts_not_stored(
      grid_texts(request, guided ? std::optional<std::string>(request.config.sample.negative_prompt) : std::nullopt),
      request.config.trigger_word, stored);
  const std::vector<std::pair<SamplerFile, std::string>> text = text_paths(files);
  check_sampler_parts({.model = "Qwen-Image",
                       .vae = kVae,
                       .vae_path = files.vae,
                       .text = text,
                       .where_all = "a diffusers pipeline folder as model.name_or_path, such as Qwen-Image/, gives "
                                    "all three",
                       .stored = &stored,
                       .not_stored = not_stored,
                       .dataset_path = dataset.path(),
                       .stored_rule = "sample.prompts and sample.negative_prompt with the trigger word put in must "
                                      "equal them byte for byte to be used without the text encoder; `wick dataset "
                                      "encode --model qwenimage --config` stores both"});
  vae::ImageVaeInfo sizes;
  try {
    sizes = vae::open_wan_image_vae(files.vae, {})->info();  // headers only
  } catch (const WickError& error) {
    throw WickError(error.kind(), "model.vae_path " + files.vae + ": " + message_of(error));
  }
  const SamplerDataset from_data =
      sampler_dataset(dataset, "qwenimage", {.scaling_factor = 1.0, .shift_factor = 0.0}, sizes, files.vae);

  auto sampler = make_naming_text_parts<QwenImageImageSampler>("Qwen-Image", text, [&] {
    return std::make_unique<QwenImageImageSampler>(
        QwenImageSamplerSetup{.files = files,
                              .max_length = max_length,
                              .schedule = pipeline_schedule(files.pipeline),
                              .negative_prompt = request.config.sample.negative_prompt,
                              .normalization = from_data.normalization,
                              .default_height = from_data.default_height,
                              .default_width = from_data.default_width,
                              .trigger_word = request.config.trigger_word,
                              .device = request.device,
                              .keep_loaded = model.options.get_bool("keep_encoders_loaded"),
                              .stored_prompts = std::move(stored)});
  });
  if (const QwenImageTextEncoder* encoder = sampler->encoder())
    WICK_CHECK_KIND(Config, dataset.text_dim() == 0 || dataset.text_dim() == encoder->qwen25.config().hidden_size,
                    dataset.path(), "'s text embeddings are ", dataset.text_dim(), " wide but Qwen2.5-VL "
                    "(model.text_encoder_path ", files.text_encoder, ") is ", encoder->qwen25.config().hidden_size,
                    " wide");
  return sampler;
}

}  // namespace wick::qwenimage
