#include "models/zimage/zimage_sampler.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "engine/autograd/grad_mode.h"
#include "engine/data/captions.h"
#include "models/diffusion/generate.h"
#include "models/diffusion/samplers.h"
#include "models/text/stored_prompts.h"
#include "models/weights/pipeline_folder.h"
#include "runtime/error.h"
#include "runtime/ops/join.h"

namespace wick::zimage {

using text::prompt_text;
namespace {

const SamplerFile kVae{.label = "the VAE",
                       .key = "vae_path",
                       .hint = "ae.safetensors (the Flux VAE), a diffusers vae/ folder or a pipeline folder",
                       .pipeline_parts = {"vae", "ae.safetensors"}};
const std::vector<SamplerFile>& text_files() {
  static const std::vector<SamplerFile> files = {
      {.label = "Qwen3",
       .key = "text_encoder_path",
       .hint = "qwen_3_4b.safetensors or a text_encoder/ folder",
       .pipeline_parts = {"text_encoder"}},
      {.label = "the Qwen3 tokenizer",
       .key = "tokenizer_path",
       .hint = "a tokenizer/ folder or its tokenizer.json",
       .pipeline_parts = {"tokenizer"}},
  };
  return files;
}

std::vector<std::pair<SamplerFile, std::string>> text_paths(const ZImageSamplingFiles& f) {
  const std::vector<SamplerFile>& files = text_files();
  return {{files[0], f.text_encoder}, {files[1], f.tokenizer}};
}

// Qwen3 and its tokenizer, unless stored prompts are given and a text part is not.
std::optional<ZImageTextEncoder> open_encoder(const ZImageSamplerSetup& setup) {
  const ZImageSamplingFiles& f = setup.files;
  if (setup.stored_prompts && (f.text_encoder.empty() || f.tokenizer.empty())) return std::nullopt;
  return ZImageTextEncoder::from_files(f.text_encoder, f.tokenizer,
                                       {.device = setup.device, .keep_loaded = setup.keep_loaded});
}


}  // namespace

ZImageSamplingFiles sampling_files(const ModelConfig& model) {
  std::vector<SamplerFile> files = text_files();
  files.push_back(kVae);
  std::string pipeline;
  std::map<std::string, std::string> paths = resolve_sampler_files(model, files, &pipeline);
  return {.vae = paths["vae_path"],
          .text_encoder = paths["text_encoder_path"],
          .tokenizer = paths["tokenizer_path"],
          .pipeline = pipeline};
}

std::vector<double> zimage_sigmas(int64_t steps, double shift) {
  WICK_CHECK_KIND(Config, steps >= 1, "Z-Image sampler: steps must be >= 1, got ", steps);
  WICK_CHECK_KIND(Config, shift > 0, "Z-Image sampler: the shift must be positive, got ", shift);
  // In float32 as the pipeline computes them: torch.linspace (start + i·step for the first half,
  // end − (n − 1 − i)·step for the rest), then the scheduler's shift in numpy float32.
  const float start = 1.0f, end = 1.0f / static_cast<float>(steps), s = static_cast<float>(shift);
  const float step = steps == 1 ? 0.0f : (end - start) / static_cast<float>(steps - 1);
  std::vector<double> sigmas;
  for (int64_t i = 0; i < steps; ++i) {
    const float x = i < steps / 2 ? start + step * static_cast<float>(i)
                                  : end - step * static_cast<float>(steps - 1 - i);
    sigmas.push_back(static_cast<double>(s * x / (1.0f + (s - 1.0f) * x)));
  }
  sigmas.push_back(0.0);
  return sigmas;
}

// ---- ZImageImageSampler ----

ZImageImageSampler::ZImageImageSampler(ZImageSamplerSetup setup)
    : LatentImageSampler(latent_setup_of(setup, "Z-Image", {kVaeNormalization, "zimage"}, text_paths(setup.files))),
      zimage_(std::move(setup)), encoder_(open_encoder(zimage_)) {
  WICK_CHECK_KIND(Config, zimage_.max_length >= 1, "Z-Image sampler: max_length must be >= 1, got ",
                  zimage_.max_length);
  WICK_CHECK_KIND(Config, zimage_.shift > 0, "Z-Image sampler: the shift must be positive, got ", zimage_.shift);
}

void ZImageImageSampler::check_fits(const ZImageTransformer& model) const {
  const ZImageConfig& c = model.config();
  WICK_CHECK_KIND(Config, c.in_channels == vae_sizes().z_channels, "the Z-Image model takes ", c.in_channels,
                  "-channel latents but the VAE ", zimage_.files.vae, " has ", vae_sizes().z_channels);
  if (encoder_)
    WICK_CHECK_KIND(Config, c.cap_feat_dim == encoder_->qwen3.config().hidden_size, "the Z-Image model takes ",
                    c.cap_feat_dim, "-wide caption features (cap_embedder) but Qwen3 ", zimage_.files.text_encoder,
                    " is ", encoder_->qwen3.config().hidden_size, " wide");
  check_stored_widths(c.cap_feat_dim, "caption features (cap_embedder)", 0, "pooled vector (none)");
}

LatentImageSampler::SizeRule ZImageImageSampler::size_rule(DiffusionModel& model) const {
  WICK_CHECK_KIND(Config, dynamic_cast<ZImageTransformer*>(&model) != nullptr,
                  "the Z-Image sampler needs a Z-Image model, got ", model.summary());
  return {.latent_multiple = 2, .why = "the 2 x 2 patches"};
}

Tensor ZImageImageSampler::sample(DiffusionModel& model, const std::vector<std::string>& prompts, const Tensor& noise,
                                  const SampleSettings& settings) {
  return generate_from_noise(dynamic_cast<ZImageTransformer&>(model), prompts, noise, settings);
}

Tensor ZImageImageSampler::generate_from_noise(ZImageTransformer& model, const std::vector<std::string>& prompts,
                                               const Tensor& noise, const SampleSettings& settings) {
  const auto n = static_cast<int64_t>(prompts.size());
  const int64_t channels = vae_sizes().z_channels;
  WICK_CHECK(noise.dim() == 4 && noise.size(0) == n && noise.size(1) == channels && noise.size(2) % 2 == 0 &&
                 noise.size(3) % 2 == 0,
             "Z-Image sampler: noise must be [", n, ", ", channels, ", h, w] with h and w even, got ",
             noise.describe());
  WICK_CHECK_KIND(Config, settings.steps >= 1, "Z-Image sampler: steps must be >= 1, got ", settings.steps);
  WICK_CHECK_KIND(Config, settings.guidance >= 0, "Z-Image sampler: guidance must be >= 0, got ", settings.guidance);
  check_fits(model);
  model.check_latent_size(noise.size(2), noise.size(3));
  const Device device = device_of(model);
  EvalModeGuard eval_mode(model);
  autograd::NoGradGuard no_grad;

  // The prompts' rows, then the negative prompt's (one row, repeated per batch) when guided.
  const bool guided = settings.guidance != 1.0;
  std::vector<std::string> texts = texts_of(prompts);
  const std::string negative = prompt_text(zimage_.negative_prompt, zimage_.trigger_word);
  if (guided) texts.push_back(negative);
  const int64_t max_length = zimage_.max_length;
  std::string length_note;
  if (stored() && stored()->embeds.size(1) != max_length)
    length_note = ", made with max_length " + std::to_string(stored()->embeds.size(1)) + ", not " +
                  std::to_string(max_length);
  auto [context, pooled, mask] = embed(
      texts, [max_length](int64_t stored_length) { return stored_length == max_length; },
      [&](const std::vector<std::string>& to_encode) {
        return encode_zimage_prompts(*encoder_, to_encode, {.max_length = max_length});
      },
      negative, length_note);
  context = context.to(device);
  mask = mask.to(device);

  diffusion::FlowSamplerConfig flow;
  flow.sigmas = zimage_sigmas(settings.steps, zimage_.shift);
  flow.n_steps = settings.steps;
  const diffusion::Denoiser denoiser = model_denoiser(model, NoiseScheduler::FlowMatch);
  std::vector<Tensor> latents;
  for (int64_t first = 0; first < n; first += kSampleBatch) {
    const int64_t count = std::min(kSampleBatch, n - first);
    diffusion::Conditioning cond{.context = context.narrow(0, first, count),
                                 .context_mask = mask.narrow(0, first, count)};
    if (guided) {
      flow.guidance.scale = settings.guidance;
      flow.guidance.uncond = {
          .context = context.narrow(0, n, 1).expand({count, context.size(1), context.size(2)}).contiguous(),
          .context_mask = mask.narrow(0, n, 1).expand({count, mask.size(1)}).contiguous()};
    }
    Tensor x = noise.narrow(0, first, count).to(DType::F32).to(device).contiguous();
    latents.push_back(diffusion::sample_flow_euler(denoiser, x, cond, flow).to(DType::F32).to(Device::cpu()));
  }
  return decode(latents.size() == 1 ? latents.front() : concat(latents, 0));
}

std::string ZImageImageSampler::describe_text() const {
  return encoder_ ? ", Qwen3 " + encoder_->qwen3.source_path() : std::string();
}

std::string ZImageImageSampler::describe_choices() const {
  char shift[32];
  std::snprintf(shift, sizeof(shift), "%g", zimage_.shift);
  return ", max_length " + std::to_string(zimage_.max_length) + ", shift " + shift + ", negative prompt \"" +
         prompt_text(zimage_.negative_prompt, zimage_.trigger_word) + "\"";
}

// ---- for a run ----

std::unique_ptr<ImageSampler> make_zimage_sampler(const SamplerRequest& request) {
  const ModelConfig& model = request.config.model;
  const LatentDataset& dataset = request.dataset;
  const SamplerKind asked = request.config.sample.sampler;
  WICK_CHECK_KIND(Config, asked == SamplerKind::Auto || asked == SamplerKind::Euler, "sample.sampler: ",
                  sampler_name(asked), " does not fit Z-Image, a rectified-flow model (use euler or auto)");
  const ZImageSamplingFiles files = sampling_files(model);

  // The caption length: what the dataset's embeddings were made with, else model.max_length.
  const LatentDatasetAttributes& data = dataset.attributes();
  const bool zimage_text = data.text_embeds_encoder == kTextEmbedsEncoder;
  const int64_t max_length = zimage_text && data.text_max_length > 0 ? data.text_max_length
                                                                     : model.options.get_int("max_length");

  std::optional<SamplePrompts> stored = stored_prompts_for(dataset, zimage_text);
  if (stored && stored->embeds.size(1) != max_length) stored.reset();
  const bool guided = request.config.sample.guidance != 1.0;
  const std::vector<std::string> not_stored = text::texts_not_stored(
      grid_texts(request, guided ? std::optional<std::string>(request.config.sample.negative_prompt) : std::nullopt),
      request.config.trigger_word, stored);
  const std::vector<std::pair<SamplerFile, std::string>> text = text_paths(files);
  check_sampler_parts({.model = "Z-Image",
                       .vae = kVae,
                       .vae_path = files.vae,
                       .text = text,
                       .where_all = "a diffusers pipeline folder as model.name_or_path, such as Z-Image-Turbo/, gives "
                                    "all three",
                       .stored = &stored,
                       .not_stored = not_stored,
                       .dataset_path = dataset.path(),
                       .stored_rule = "sample.prompts and sample.negative_prompt with the trigger word put in must "
                                      "equal them byte for byte to be used without the text encoder; `wick dataset "
                                      "encode --model zimage --config` stores both"});
  const vae::VaeConfig sizes = sampler_vae_config(files.vae);
  const SamplerDataset from_data = sampler_dataset(dataset, "zimage", kVaeNormalization, sizes, files.vae);

  const double configured_shift = model.options.get_float("sample_shift");
  double shift = 3.0;
  if (configured_shift > 0) {
    shift = configured_shift;
  } else if (std::optional<double> from_pipeline = pipeline_shift(files.pipeline, "Z-Image's")) {
    shift = *from_pipeline;
  }
  auto sampler = make_naming_text_parts<ZImageImageSampler>("Z-Image", text, [&] {
    return std::make_unique<ZImageImageSampler>(
        ZImageSamplerSetup{.files = files,
                           .max_length = max_length,
                           .shift = shift,
                           .negative_prompt = request.config.sample.negative_prompt,
                           .normalization = from_data.normalization,
                           .default_height = from_data.default_height,
                           .default_width = from_data.default_width,
                           .trigger_word = request.config.trigger_word,
                           .device = request.device,
                           .keep_loaded = model.options.get_bool("keep_encoders_loaded"),
                           .stored_prompts = std::move(stored)});
  });
  if (const ZImageTextEncoder* encoder = sampler->encoder())
    WICK_CHECK_KIND(Config, dataset.text_dim() == 0 || dataset.text_dim() == encoder->qwen3.config().hidden_size,
                    dataset.path(), "'s text embeddings are ", dataset.text_dim(), " wide but Qwen3 "
                    "(model.text_encoder_path ", files.text_encoder, ") is ", encoder->qwen3.config().hidden_size,
                    " wide");
  return sampler;
}

}  // namespace wick::zimage
