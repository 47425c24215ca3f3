#include "models/sd3/sd3_sampler.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "engine/autograd/grad_mode.h"
#include "engine/data/captions.h"
#include "models/diffusion/generate.h"
#include "models/diffusion/samplers.h"
#include "models/sampler_files.h"
#include "models/text/stored_prompts.h"
#include "models/vae/vae_weights.h"
#include "models/weights/pipeline_folder.h"
#include "runtime/error.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/index.h"
#include "runtime/ops/join.h"

namespace fs = std::filesystem;

namespace wick::sd3 {

using text::prompt_text;
namespace {

// Images per MMDiT call (twice as many rows with guidance).
constexpr int64_t kSampleBatch = 4;

Device device_of(const Module& model) {
  auto parameters = model.named_parameters();
  return parameters.empty() ? Device::cpu() : parameters.front().second.device();
}

bool text_parts_given(const Sd3SamplingFiles& f) {
  return !f.clip_l.empty() && !f.clip_g.empty() && !f.t5.empty() && !f.clip_tokenizer.empty() &&
         !f.t5_tokenizer.empty();
}

// The text encoders, unless stored prompts are given and a text part is not.
std::optional<Sd3TextEncoders> open_encoders(const Sd3SamplerSetup& setup) {
  const Sd3SamplingFiles& f = setup.files;
  if (setup.stored_prompts && !text_parts_given(f)) return std::nullopt;
  return Sd3TextEncoders::from_files({.clip_l = f.clip_l,
                                      .clip_g = f.clip_g,
                                      .t5 = f.t5,
                                      .clip_vocab = f.clip_tokenizer,
                                      .clip_g_vocab = f.clip_g_tokenizer,
                                      .t5_tokenizer = f.t5_tokenizer},
                                     {.device = setup.device, .keep_loaded = setup.keep_loaded});
}

vae::VaeConfig read_vae_sizes(const Sd3SamplerSetup& setup) {
  WICK_CHECK_KIND(Config, !setup.files.vae.empty(), "sd3 sampler: the VAE (files.vae) is not given");
  return vae::read_vae_header(setup.files.vae).config;
}

std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : separator) + item;
  return out;
}

double sigma_shift(double t, double shift) { return shift * t / (1.0 + (shift - 1.0) * t); }

// scheduler/scheduler_config.json's "shift" of a pipeline folder, when it has one.
std::optional<double> pipeline_shift(const std::string& pipeline) {
  if (pipeline.empty()) return std::nullopt;
  const fs::path path = fs::path(pipeline) / "scheduler" / "scheduler_config.json";
  std::ifstream in(path);
  if (!in) return std::nullopt;
  nlohmann::json json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  WICK_CHECK_KIND(Data, !json.is_discarded() && json.is_object(), path.string(), " is not a JSON object");
  if (!json.contains("shift")) return std::nullopt;
  WICK_CHECK_KIND(Data, json["shift"].is_number() && json["shift"].get<double>() > 0, path.string(),
                  ": shift is not a positive number");
  WICK_CHECK_KIND(Config, !json.value("use_dynamic_shifting", false), path.string(), ": use_dynamic_shifting is on, "
                  "which SD3.5's scheduler does not use (set model.sample_shift to sample with a constant shift)");
  return json["shift"].get<double>();
}

}  // namespace

Sd3SamplingFiles sampling_files(const ModelConfig& model) {
  const ModelOptions& o = model.options;
  Sd3SamplingFiles files{.vae = o.get_string("vae_path"),
                         .clip_l = o.get_string("clip_l_path"),
                         .clip_g = o.get_string("clip_g_path"),
                         .t5 = o.get_string("t5_path"),
                         .clip_tokenizer = o.get_string("clip_tokenizer_path"),
                         .clip_g_tokenizer = o.get_string("clip_g_tokenizer_path"),
                         .t5_tokenizer = o.get_string("t5_tokenizer_path")};
  auto fill = [](std::string& slot, const std::string& value) {
    if (slot.empty()) slot = value;
  };
  if (std::optional<std::string> root = pipeline_folder(model.name_or_path)) {
    fill(files.vae, pipeline_part(*root, {"vae"}));
    fill(files.clip_l, pipeline_part(*root, {"text_encoder"}));
    fill(files.clip_g, pipeline_part(*root, {"text_encoder_2"}));
    fill(files.t5, pipeline_part(*root, {"text_encoder_3"}));
    fill(files.clip_tokenizer, pipeline_part(*root, {"tokenizer"}));
    fill(files.clip_g_tokenizer, pipeline_part(*root, {"tokenizer_2"}));
    fill(files.t5_tokenizer, pipeline_part(*root, {"tokenizer_3"}));
    files.pipeline = *root;
  }
  // SAI's single files: the VAE under first_stage_model., the encoders (when included) under text_encoders.
  const std::string& file = model.name_or_path;
  if (files.vae.empty() && file_has_prefix(file, "first_stage_model.")) files.vae = file;
  if (files.clip_l.empty() && file_has_prefix(file, "text_encoders.clip_l.transformer.")) files.clip_l = file;
  if (files.clip_g.empty() && file_has_prefix(file, "text_encoders.clip_g.transformer.")) files.clip_g = file;
  if (files.t5.empty() && file_has_prefix(file, "text_encoders.t5xxl.transformer.")) files.t5 = file;
  return files;
}

std::vector<double> sd3_sigmas(int64_t steps, double shift) {
  WICK_CHECK_KIND(Config, steps >= 1, "sd3 sampler: steps must be >= 1, got ", steps);
  WICK_CHECK_KIND(Config, shift > 0, "sd3 sampler: the shift must be > 0, got ", shift);
  // diffusers keeps σ_min = shift(1/1000) as a float32 (.item() of its sigma table).
  const double sigma_min = static_cast<double>(static_cast<float>(sigma_shift(1.0 / 1000.0, shift)));
  std::vector<double> sigmas;
  for (int64_t k = 0; k < steps; ++k) {
    const double fraction = steps == 1 ? 0.0 : static_cast<double>(k) / static_cast<double>(steps - 1);
    const double t = 1.0 + (sigma_min - 1.0) * fraction;
    sigmas.push_back(sigma_shift(t, shift));
  }
  sigmas.push_back(0.0);
  return sigmas;
}

// ---- Sd3ImageSampler ----

Sd3ImageSampler::Sd3ImageSampler(Sd3SamplerSetup setup)
    : setup_(std::move(setup)), encoders_(open_encoders(setup_)), vae_sizes_(read_vae_sizes(setup_)) {
  WICK_CHECK_KIND(Config, setup_.t5_length >= 1, "sd3 sampler: t5_length must be >= 1, got ", setup_.t5_length);
  WICK_CHECK_KIND(Config, setup_.shift > 0, "sd3 sampler: the shift must be > 0, got ", setup_.shift);
  if (const std::optional<SamplePrompts>& stored = setup_.stored_prompts) {
    const auto k = static_cast<int64_t>(stored->captions.size());
    WICK_CHECK(stored->embeds.dim() == 3 && stored->embeds.size(0) == k && stored->pooled.dim() == 2 &&
                   stored->pooled.size(0) == k,
               "sd3 sampler: stored prompts must be embeds [K, L, D] and pooled [K, P] for K captions, got ", k,
               " captions, ", stored->embeds.describe(), ", ", stored->pooled.describe());
    for (int64_t row = 0; row < k; ++row) stored_row_.emplace(stored->captions[static_cast<size_t>(row)], row);
  }
}

bool Sd3ImageSampler::is_stored(const std::string& prompt) const {
  if (!setup_.stored_prompts || stored_row_.count(prompt_text(prompt, setup_.trigger_word)) == 0) return false;
  // Rows of one batch must have one length: with encoders, stored rows must be as long as encoded ones.
  if (!encoders_) return true;
  return setup_.stored_prompts->embeds.size(1) == encoders_->clip_l_tokenizer.context_length() + setup_.t5_length;
}

std::string Sd3ImageSampler::missing_text_parts() const {
  const Sd3SamplingFiles& f = setup_.files;
  std::vector<std::string> missing;
  if (f.clip_l.empty()) missing.push_back("CLIP-L (model.clip_l_path)");
  if (f.clip_g.empty()) missing.push_back("CLIP-G (model.clip_g_path)");
  if (f.t5.empty()) missing.push_back("T5-XXL (model.t5_path)");
  if (f.clip_tokenizer.empty()) missing.push_back("the CLIP tokenizer (model.clip_tokenizer_path)");
  if (f.t5_tokenizer.empty()) missing.push_back("the T5 tokenizer (model.t5_tokenizer_path)");
  return join(missing, ", ");
}

void Sd3ImageSampler::check_fits(const MMDiT& model) const {
  const Sd3Config& c = model.config();
  WICK_CHECK_KIND(Config, c.in_channels == vae_sizes_.z_channels, "the SD3 model takes ", c.in_channels,
                  "-channel latents (x_embedder) but the VAE ", setup_.files.vae, " has ", vae_sizes_.z_channels);
  if (encoders_) {
    WICK_CHECK_KIND(Config, c.context_dim == encoders_->t5.d_model(), "the SD3 model takes ", c.context_dim,
                    "-wide text (context_embedder) but the T5 encoder ", setup_.files.t5, " is ",
                    encoders_->t5.d_model(), " wide");
    const bool projected = setup_.clip_l_pooled == ClipLPooled::Projected;
    WICK_CHECK_KIND(Config, !projected || encoders_->clip_l.projection_dim() > 0, "CLIP-L ", setup_.files.clip_l,
                    " has no text_projection.weight, and the pooled vectors are CLIP-L's projected ones (diffusers', "
                    "kohya's: what the dataset's embeddings were made with); give a CLIP-L with its projection "
                    "(diffusers' text_encoder/), or encode the dataset with --clip-l-pooled unprojected");
    const int64_t l_pooled = projected ? encoders_->clip_l.projection_dim() : encoders_->clip_l.width();
    const int64_t pooled = l_pooled + encoders_->clip_g.projection_dim();
    WICK_CHECK_KIND(Config, c.pooled_dim == pooled, "the SD3 model takes a ", c.pooled_dim,
                    "-wide pooled vector (y_embedder) but CLIP-L ", setup_.files.clip_l, " and CLIP-G ",
                    setup_.files.clip_g, " pool to ", l_pooled, " + ", encoders_->clip_g.projection_dim(), " = ",
                    pooled);
  }
  if (const std::optional<SamplePrompts>& stored = setup_.stored_prompts) {
    WICK_CHECK_KIND(Config, c.context_dim == stored->embeds.size(2), "the SD3 model takes ", c.context_dim,
                    "-wide text (context_embedder) but the stored sample prompts are ", stored->embeds.size(2),
                    " wide");
    WICK_CHECK_KIND(Config, c.pooled_dim == stored->pooled.size(1), "the SD3 model takes a ", c.pooled_dim,
                    "-wide pooled vector (y_embedder) but the stored sample prompts' is ", stored->pooled.size(1),
                    " wide");
  }
}

Tensor Sd3ImageSampler::generate(DiffusionModel& model, const std::vector<std::string>& prompts,
                                 const SampleSettings& settings) {
  auto* mmdit = dynamic_cast<MMDiT*>(&model);
  WICK_CHECK_KIND(Config, mmdit != nullptr, "the SD3 sampler needs an SD3 model, got ", model.summary());
  const int64_t height = settings.height > 0 ? settings.height : setup_.default_height;
  const int64_t width = settings.width > 0 ? settings.width : setup_.default_width;
  const int64_t f = vae_sizes_.downscale(), multiple = f * mmdit->config().patch_size;
  auto near = [multiple](int64_t v) { return std::max<int64_t>(multiple, (v + multiple / 2) / multiple * multiple); };
  WICK_CHECK_KIND(Config, height > 0 && width > 0, "sd3 sampler: no image size (give sample.width and sample.height)");
  WICK_CHECK_KIND(Config, height % multiple == 0 && width % multiple == 0, "image size ", width, " x ", height,
                  " (sample.width x sample.height): SD3 images must be multiples of ", multiple, " pixels (the VAE's ",
                  f, " x the 2 x 2 patches); the nearest are ", near(width), " x ", near(height));
  mmdit->check_latent_size(height / f, width / f);
  const auto n = static_cast<int64_t>(prompts.size());
  if (n == 0) return Tensor::empty({0, vae_sizes_.out_channels, height, width}, DType::F32);
  Tensor noise = sample_noise({vae_sizes_.z_channels, height / f, width / f}, 0, n, settings.seed, device_of(*mmdit));
  return generate_from_noise(*mmdit, prompts, noise, settings);
}

std::pair<Tensor, Tensor> Sd3ImageSampler::embed(const std::vector<std::string>& texts) {
  const text::PromptPlan plan = text::plan_prompts(texts, [this](const std::string& text) -> std::optional<int64_t> {
    if (!is_stored(text)) return std::nullopt;
    return stored_row_.at(text);
  });
  if (!plan.to_encode.empty() && !encoders_) {
    const bool negative = plan.to_encode.front() == prompt_text(setup_.negative_prompt, setup_.trigger_word);
    WICK_FAIL(Config, "the ", negative ? "negative prompt" : "prompt", " \"", plan.to_encode.front(),
              "\" is not among the sample prompts stored in the dataset (", text::quoted_captions(*setup_.stored_prompts),
              "), so it needs the text encoders, and these are not given: ", missing_text_parts(),
              " (a diffusers pipeline folder as model.name_or_path gives all of them; wick sample takes "
              "--set model.clip_l_path=... and the like)");
  }
  text::PromptEmbeddings encoded;
  if (!plan.to_encode.empty()) encoded = encode_sd3_prompts(*encoders_, plan.to_encode,
                                                          {.t5_length = setup_.t5_length, .clip_l_pooled = setup_.clip_l_pooled});
  return text::gather_prompts(plan, setup_.stored_prompts ? &*setup_.stored_prompts : nullptr, encoded);
}

Tensor Sd3ImageSampler::generate_from_noise(MMDiT& model, const std::vector<std::string>& prompts, const Tensor& noise,
                                            const SampleSettings& settings) {
  const auto n = static_cast<int64_t>(prompts.size());
  WICK_CHECK(noise.dim() == 4 && noise.size(0) == n && noise.size(1) == vae_sizes_.z_channels &&
                 noise.size(2) % 2 == 0 && noise.size(3) % 2 == 0,
             "sd3 sampler: noise must be [", n, ", ", vae_sizes_.z_channels, ", h, w] with h and w even, got ",
             noise.describe());
  WICK_CHECK_KIND(Config, settings.steps >= 1, "sd3 sampler: steps must be >= 1, got ", settings.steps);
  WICK_CHECK_KIND(Config, settings.guidance >= 0, "sd3 sampler: guidance must be >= 0, got ", settings.guidance);
  check_fits(model);
  model.check_latent_size(noise.size(2), noise.size(3));
  const Device device = device_of(model);
  EvalModeGuard eval_mode(model);
  autograd::NoGradGuard no_grad;

  // The prompts' rows, then the negative prompt's (one row, repeated per batch), in one table.
  const bool guided = settings.guidance != 1.0;
  std::vector<std::string> texts;
  for (const std::string& prompt : prompts) texts.push_back(prompt_text(prompt, setup_.trigger_word));
  if (guided) texts.push_back(prompt_text(setup_.negative_prompt, setup_.trigger_word));
  auto [context, pooled] = embed(texts);
  context = context.to(device);
  pooled = pooled.to(device);

  diffusion::FlowSamplerConfig flow;
  flow.sigmas = sd3_sigmas(settings.steps, setup_.shift);
  flow.n_steps = settings.steps;
  const diffusion::Denoiser denoiser = model_denoiser(model, NoiseScheduler::FlowMatch);
  std::vector<Tensor> latents;
  for (int64_t first = 0; first < n; first += kSampleBatch) {
    const int64_t count = std::min(kSampleBatch, n - first);
    diffusion::Conditioning cond{.context = context.narrow(0, first, count), .pooled = pooled.narrow(0, first, count)};
    if (guided) {
      flow.guidance.scale = settings.guidance;
      flow.guidance.uncond = {
          .context = context.narrow(0, n, 1).expand({count, context.size(1), context.size(2)}).contiguous(),
          .pooled = pooled.narrow(0, n, 1).expand({count, pooled.size(1)}).contiguous()};
    }
    Tensor x = noise.narrow(0, first, count).to(DType::F32).to(device).contiguous();
    latents.push_back(diffusion::sample_flow_euler(denoiser, x, cond, flow).to(DType::F32).to(Device::cpu()));
  }
  return decode(latents.size() == 1 ? latents.front() : concat(latents, 0));
}

Tensor Sd3ImageSampler::decode(const Tensor& latents) {
  std::shared_ptr<vae::AutoencoderKL> model = vae_;
  if (!model) {
    const vae::LatentNormalization& norm = setup_.normalization;
    model = vae::load_vae(setup_.files.vae, {.family = vae::VaeFamily::Sd3,
                                             .scaling_factor = norm.scaling_factor,
                                             .shift_factor = norm.shift_factor,
                                             .dtype = setup_.device.is_cuda() ? DType::BF16 : DType::F32,
                                             .device = setup_.device})
                .model;
    if (setup_.keep_loaded) vae_ = model;
  }
  return vae::decode_to_images(*model, latents, setup_.normalization, setup_.device);
}

void Sd3ImageSampler::unload() {
  vae_.reset();
  if (encoders_) {
    encoders_->clip_l.unload();
    encoders_->clip_g.unload();
    encoders_->t5.unload();
  }
}

std::string Sd3ImageSampler::describe() const {
  std::string out = "SD3: VAE " + setup_.files.vae;
  if (encoders_)
    out += ", CLIP-L " + encoders_->clip_l.source_path() + ", CLIP-G " + encoders_->clip_g.source_path() + ", T5 " +
           encoders_->t5.source_path();
  char shift[32];
  std::snprintf(shift, sizeof(shift), "%g", setup_.shift);
  out += ", T5 length " + std::to_string(setup_.t5_length) + ", CLIP-L pooled " +
         clip_l_pooled_name(setup_.clip_l_pooled) + ", shift " + shift + ", negative prompt \"" +
         prompt_text(setup_.negative_prompt, setup_.trigger_word) + "\"";
  if (setup_.stored_prompts) {
    const size_t k = setup_.stored_prompts->captions.size();
    out += "; the embeddings of the " + std::to_string(k) + " sample prompt" + (k == 1 ? "" : "s") +
           " stored in the dataset";
    if (!encoders_) out += ", no text encoders (other prompts need " + missing_text_parts() + ")";
  }
  return out;
}

// ---- for a run ----

std::unique_ptr<ImageSampler> make_sd3_sampler(const SamplerRequest& request) {
  const ModelConfig& model = request.config.model;
  const LatentDataset& dataset = request.dataset;
  const SamplerKind asked = request.config.sample.sampler;
  WICK_CHECK_KIND(Config, asked == SamplerKind::Auto || asked == SamplerKind::Euler, "sample.sampler: ",
                  sampler_name(asked), " does not fit SD3, a rectified-flow model (use euler or auto)");
  const Sd3SamplingFiles files = sampling_files(model);

  // The T5 length: the key, else what the dataset's embeddings were made with, else diffusers' 256.
  const LatentDatasetAttributes& data = dataset.attributes();
  const bool sd3_text = data.text_embeds_encoder.rfind("clip-l+clip-g", 0) == 0;
  const int64_t configured = model.options.get_int("t5_length");
  const int64_t recorded = sd3_text ? data.text_max_length : 0;
  WICK_CHECK_KIND(Config, configured == 0 || recorded == 0 || configured == recorded, "model.t5_length is ", configured,
                  " but the text embeddings of ", dataset.path(), " were made with ", recorded,
                  " T5 tokens (text_max_length); SD3 attends to T5's padding, so train and sample with the same "
                  "length (set model.t5_length: ", recorded, " or leave it out)");
  const int64_t t5_length = configured > 0 ? configured : recorded > 0 ? recorded : 256;
  const ClipLPooled clip_l_pooled = data.text_pooled_encoder == "clip-l+clip-g projected" ? ClipLPooled::Unprojected
                                                                                          : ClipLPooled::Projected;

  // The dataset's stored sample prompts, when they are SD3's at this T5 length; the text encoders are optional when
  // they hold every prompt of the grid and, with guidance, the negative prompt.
  std::optional<SamplePrompts> stored;
  if (sd3_text && recorded > 0) stored = dataset.sample_prompts();
  if (stored && stored->captions.empty()) stored.reset();
  std::vector<std::string> grid = request.config.sample.prompts;
  if (request.config.sample.n_per_class > 0)
    grid.insert(grid.end(), data.label_names.begin(), data.label_names.end());
  if (request.config.sample.guidance != 1.0) grid.push_back(request.config.sample.negative_prompt);
  const std::vector<std::string> not_stored = text::texts_not_stored(grid, request.config.trigger_word, stored);
  const bool text_optional = stored && not_stored.empty();

  std::vector<std::string> missing;
  if (files.vae.empty())
    missing.push_back("the VAE (model.vae_path: a diffusers vae/ folder, a VAE file or an SD3.5 single file)");
  if (!text_optional) {
    if (files.clip_l.empty())
      missing.push_back("CLIP-L (model.clip_l_path: clip_l.safetensors or a text_encoder/ folder)");
    if (files.clip_g.empty())
      missing.push_back("CLIP-G (model.clip_g_path: clip_g.safetensors or a text_encoder_2/ folder)");
    if (files.t5.empty())
      missing.push_back("T5-XXL (model.t5_path: t5xxl_fp16.safetensors or a text_encoder_3/ folder)");
    if (files.clip_tokenizer.empty())
      missing.push_back("the CLIP tokenizer (model.clip_tokenizer_path: a tokenizer/ folder with vocab.json and "
                        "merges.txt, or open_clip's bpe_simple_vocab_16e6.txt.gz)");
    if (files.t5_tokenizer.empty())
      missing.push_back("the T5 tokenizer (model.t5_tokenizer_path: spiece.model or a tokenizer_3/ folder)");
  }
  std::string why_text;  // why the text encoders are needed although the dataset stores sample prompts
  if (!text_optional && stored && missing.size() > (files.vae.empty() ? 1u : 0u))
    why_text = "; the sample prompts stored in " + dataset.path() + " do not hold \"" + not_stored.front() +
               "\" (sample.prompts and sample.negative_prompt with the trigger word put in must equal them byte for "
               "byte to be used without text encoders; `wick dataset encode --model sd3 --config` stores both)";
  WICK_CHECK_KIND(Config, missing.empty(), "SD3 sample images need ", join(missing, "; "), ", and ",
                  missing.size() == 1 ? "it is" : "they are",
                  " not given (a diffusers pipeline folder as model.name_or_path, such as "
                  "stable-diffusion-3.5-large/, gives all of them)",
                  why_text);
  check_files_exist({
      {"vae_path", &files.vae},
      {"clip_l_path", &files.clip_l},
      {"clip_g_path", &files.clip_g},
      {"t5_path", &files.t5},
      {"clip_tokenizer_path", &files.clip_tokenizer},
      {"clip_g_tokenizer_path", &files.clip_g_tokenizer},
      {"t5_tokenizer_path", &files.t5_tokenizer}});
  const vae::VaeConfig sizes = sampler_vae_config(files.vae);

  const double configured_shift = model.options.get_float("sample_shift");
  double shift = 3.0;
  if (configured_shift > 0) {
    shift = configured_shift;
  } else if (std::optional<double> from_pipeline = pipeline_shift(files.pipeline)) {
    shift = *from_pipeline;
  }
  Sd3SamplerSetup setup{.files = files,
                        .t5_length = t5_length,
                        .clip_l_pooled = clip_l_pooled,
                        .shift = shift,
                        .negative_prompt = request.config.sample.negative_prompt,
                        .normalization = vae::latent_normalization(vae::VaeFamily::Sd3),
                        .trigger_word = request.config.trigger_word,
                        .device = request.device,
                        .keep_loaded = model.options.get_bool("keep_encoders_loaded"),
                        .stored_prompts = std::move(stored)};
  // The latents the model learned were normalized with the dataset's factors.
  if (data.model_family == "sd3") setup.normalization = {data.vae_scaling_factor, data.vae_shift_factor};
  WICK_CHECK_KIND(Data, !dataset.buckets().empty(), dataset.path(), ": the dataset has no buckets");
  setup.default_height = dataset.buckets().front().height * sizes.downscale();
  setup.default_width = dataset.buckets().front().width * sizes.downscale();

  std::unique_ptr<Sd3ImageSampler> sampler;
  try {
    sampler = std::make_unique<Sd3ImageSampler>(setup);
  } catch (const WickError& error) {
    throw WickError(error.kind(), "SD3 text encoders (model.clip_l_path " + files.clip_l + ", model.clip_g_path " +
                                      files.clip_g + ", model.t5_path " + files.t5 + ", model.clip_tokenizer_path " +
                                      files.clip_tokenizer + ", model.t5_tokenizer_path " + files.t5_tokenizer +
                                      "): " + message_of(error));
  }
  WICK_CHECK_KIND(Config, data.latent_channels == 0 || data.latent_channels == sizes.z_channels, dataset.path(),
                  " holds ", data.latent_channels, "-channel latents but the VAE (model.vae_path ", files.vae,
                  ") has ", sizes.z_channels);
  if (const Sd3TextEncoders* encoders = sampler->encoders()) {
    WICK_CHECK_KIND(Config, dataset.text_dim() == 0 || dataset.text_dim() == encoders->t5.d_model(), dataset.path(),
                    "'s text embeddings are ", dataset.text_dim(), " wide but the T5 encoder (model.t5_path ",
                    files.t5, ") is ", encoders->t5.d_model(), " wide");
    const int64_t l_pooled = clip_l_pooled == ClipLPooled::Projected ? encoders->clip_l.projection_dim()
                                                                     : encoders->clip_l.width();
    const int64_t pooled = l_pooled + encoders->clip_g.projection_dim();
    WICK_CHECK_KIND(Config, dataset.pooled_dim() == 0 || dataset.pooled_dim() == pooled, dataset.path(),
                    "'s pooled embeddings are ", dataset.pooled_dim(), " wide but CLIP-L (model.clip_l_path ",
                    files.clip_l, ") and CLIP-G (model.clip_g_path ", files.clip_g, ") pool to ", pooled);
  }
  return sampler;
}

}  // namespace wick::sd3
