#include "models/sdxl/sdxl_sampler.h"

#include <algorithm>
#include <array>

#include "engine/autograd/grad_mode.h"
#include "engine/data/captions.h"
#include "models/diffusion/euler_discrete.h"
#include "models/diffusion/generate.h"
#include "models/text/stored_prompts.h"
#include "runtime/error.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/index.h"
#include "runtime/ops/join.h"

namespace wick::sdxl {

using text::prompt_text;
namespace {

// The files an SDXL run samples with, by config key.
const SamplerFile kVae{.label = "the VAE",
                       .key = "vae_path",
                       .hint = "a diffusers vae/ folder, a VAE file or an SDXL single file",
                       .pipeline_parts = {"vae"},
                       .single_file_prefix = "first_stage_model."};
const std::vector<SamplerFile>& text_files() {
  static const std::vector<SamplerFile> files = {
      {.label = "CLIP-L",
       .key = "clip_l_path",
       .hint = "a text_encoder/ folder, a CLIP-L file or an SDXL single file",
       .pipeline_parts = {"text_encoder"},
       .single_file_prefix = "conditioner.embedders.0.transformer."},
      {.label = "CLIP-G",
       .key = "clip_g_path",
       .hint = "a text_encoder_2/ folder, a bigG file or an SDXL single file",
       .pipeline_parts = {"text_encoder_2"},
       .single_file_prefix = "conditioner.embedders.1.model."},
      {.label = "the CLIP tokenizer",
       .key = "clip_tokenizer_path",
       .hint = "a tokenizer/ folder with vocab.json and merges.txt, or open_clip's bpe_simple_vocab_16e6.txt.gz",
       .pipeline_parts = {"tokenizer"}},
      {.label = "bigG's tokenizer",
       .key = "clip_g_tokenizer_path",
       .hint = "a tokenizer_2/ folder",
       .pipeline_parts = {"tokenizer_2"},
       .required = false},
  };
  return files;
}

std::vector<std::pair<SamplerFile, std::string>> text_paths(const SdxlSamplingFiles& f) {
  const std::vector<SamplerFile>& files = text_files();
  return {{files[0], f.clip_l}, {files[1], f.clip_g}, {files[2], f.clip_tokenizer}, {files[3], f.clip_g_tokenizer}};
}

bool text_parts_given(const SdxlSamplingFiles& f) {
  return !f.clip_l.empty() && !f.clip_g.empty() && !f.clip_tokenizer.empty();
}

// The text encoders, unless stored prompts are given and a text part is not.
std::optional<SdxlTextEncoders> open_encoders(const SdxlSamplerSetup& setup) {
  const SdxlSamplingFiles& f = setup.files;
  if (setup.stored_prompts && !text_parts_given(f)) return std::nullopt;
  return SdxlTextEncoders::from_files(
      {.clip_l = f.clip_l, .clip_g = f.clip_g, .clip_vocab = f.clip_tokenizer, .clip_g_vocab = f.clip_g_tokenizer},
      {.device = setup.device, .keep_loaded = setup.keep_loaded});
}

}  // namespace

SdxlSamplingFiles sampling_files(const ModelConfig& model) {
  std::vector<SamplerFile> files = text_files();
  files.push_back(kVae);
  std::string pipeline;
  std::map<std::string, std::string> paths = resolve_sampler_files(model, files, &pipeline);
  return {.vae = paths["vae_path"],
          .clip_l = paths["clip_l_path"],
          .clip_g = paths["clip_g_path"],
          .clip_tokenizer = paths["clip_tokenizer_path"],
          .clip_g_tokenizer = paths["clip_g_tokenizer_path"],
          .pipeline = pipeline};
}

// ---- SdxlImageSampler ----

SdxlImageSampler::SdxlImageSampler(SdxlSamplerSetup setup)
    : LatentImageSampler(latent_setup_of(setup, "SDXL", {kVaeNormalization, "sdxl"}, text_paths(setup.files))),
      sdxl_(std::move(setup)), encoders_(open_encoders(sdxl_)) {}

bool SdxlImageSampler::zeroes_negative() const {
  return sdxl_.zeros_for_empty_negative && prompt_text(sdxl_.negative_prompt, sdxl_.trigger_word).empty();
}

bool SdxlImageSampler::is_stored(const std::string& prompt) const {
  if (!holds(prompt)) return false;
  // Rows of one batch must have one length: with encoders, stored rows must be as long as encoded ones.
  if (!encoders_) return true;
  return stored()->embeds.size(1) == encoders_->clip_l_tokenizer.context_length();
}

void SdxlImageSampler::check_fits(const Unet& model) const {
  const UnetConfig& c = model.config();
  WICK_CHECK_KIND(Config, c.adm_in_channels > 0, "the SDXL sampler needs a UNet with SDXL's added conditioning "
                  "(label_emb: the pooled text and the size values), and ", model.summary(), " has none (an SD 1.x / "
                  "2.x UNet, which wick trains but does not sample)");
  WICK_CHECK_KIND(Config, c.in_channels == vae_sizes().z_channels, "the SDXL UNet takes ", c.in_channels,
                  "-channel latents (input_blocks.0.0) but the VAE ", sdxl_.files.vae, " has ",
                  vae_sizes().z_channels);
  if (encoders_) {
    const int64_t width = encoders_->clip_l.width() + encoders_->clip_g.width();
    WICK_CHECK_KIND(Config, c.context_dim == width, "the SDXL UNet takes ", c.context_dim,
                    "-wide text (attn2.to_k) but CLIP-L ", sdxl_.files.clip_l, " and CLIP-G ", sdxl_.files.clip_g,
                    " give ", encoders_->clip_l.width(), " + ", encoders_->clip_g.width(), " = ", width);
    WICK_CHECK_KIND(Config, c.pooled_dim() == encoders_->clip_g.projection_dim(), "the SDXL UNet takes a ",
                    c.pooled_dim(), "-wide pooled vector (label_emb) but CLIP-G ", sdxl_.files.clip_g,
                    " pools to ", encoders_->clip_g.projection_dim());
  }
  if (const std::optional<SamplePrompts>& rows = stored()) {
    WICK_CHECK_KIND(Config, c.context_dim == rows->embeds.size(2), "the SDXL UNet takes ", c.context_dim,
                    "-wide text (attn2.to_k) but the stored sample prompts are ", rows->embeds.size(2), " wide");
    WICK_CHECK_KIND(Config, c.pooled_dim() == rows->pooled.size(1), "the SDXL UNet takes a ", c.pooled_dim(),
                    "-wide pooled vector (label_emb) but the stored sample prompts' is ", rows->pooled.size(1),
                    " wide");
  }
}

LatentImageSampler::SizeRule SdxlImageSampler::size_rule(DiffusionModel& model) const {
  auto* unet = dynamic_cast<Unet*>(&model);
  WICK_CHECK_KIND(Config, unet != nullptr, "the SDXL sampler needs an SDXL UNet, got ", model.summary());
  const int64_t k = unet->config().size_multiple();
  return {.latent_multiple = k, .why = "the UNet's " + std::to_string(k)};
}

Tensor SdxlImageSampler::sample(DiffusionModel& model, const std::vector<std::string>& prompts, const Tensor& noise,
                                const SampleSettings& settings) {
  return generate_from_noise(dynamic_cast<Unet&>(model), prompts, noise, settings);
}

Tensor SdxlImageSampler::generate_from_noise(Unet& model, const std::vector<std::string>& prompts, const Tensor& noise,
                                             const SampleSettings& settings) {
  const auto n = static_cast<int64_t>(prompts.size());
  WICK_CHECK(noise.dim() == 4 && noise.size(0) == n && noise.size(1) == vae_sizes().z_channels,
             "sdxl sampler: noise must be [", n, ", ", vae_sizes().z_channels, ", h, w], got ", noise.describe());
  WICK_CHECK_KIND(Config, settings.steps >= 1, "sdxl sampler: steps must be >= 1, got ", settings.steps);
  WICK_CHECK_KIND(Config, settings.guidance >= 0, "sdxl sampler: guidance must be >= 0, got ", settings.guidance);
  check_fits(model);
  model.check_latent_size(noise.size(2), noise.size(3));
  const int64_t f = vae_sizes().downscale, height = noise.size(2) * f, width = noise.size(3) * f;
  if (n == 0) return Tensor::empty({0, vae_sizes().image_channels, height, width}, DType::F32);
  const diffusion::EulerDiscreteSchedule schedule = diffusion::euler_discrete_schedule(settings.steps);
  const Device device = device_of(model);
  EvalModeGuard eval_mode(model);
  autograd::NoGradGuard no_grad;

  // The prompts' rows, then the negative prompt's (one row, repeated per batch), in one table. The zeroed empty
  // negative is a zero row of its own (a prompt "" is still encoded).
  const bool guided = settings.guidance != 1.0, zero_negative = guided && zeroes_negative();
  std::vector<std::string> texts = texts_of(prompts);
  const std::string negative = prompt_text(sdxl_.negative_prompt, sdxl_.trigger_word);
  if (guided && !zero_negative) texts.push_back(negative);
  auto [context, pooled, mask] = embed(
      texts,
      [this](int64_t stored_length) {
        return !encoders_ || stored_length == encoders_->clip_l_tokenizer.context_length();
      },
      [this](const std::vector<std::string>& to_encode) { return encode_sdxl_prompts(*encoders_, to_encode); },
      negative);
  if (zero_negative) {
    context = concat({context, zeros({1, context.size(1), context.size(2)}, DType::F32)}, 0);
    pooled = concat({pooled, zeros({1, pooled.size(1)}, DType::F32)}, 0);
  }
  context = context.to(device);
  pooled = pooled.to(device);

  // diffusers' _get_add_time_ids: original size = target size = the image's (H, W), crop (0, 0); the same for the
  // negative prompt.
  const std::array<int64_t, 6> size_row = {height, width, 0, 0, height, width};

  diffusion::EulerDiscreteConfig euler{.v_prediction = sdxl_.v_prediction};
  const diffusion::Denoiser denoiser = model_denoiser(model, NoiseScheduler::Ddpm);
  std::vector<Tensor> latents;
  for (int64_t first = 0; first < n; first += kSampleBatch) {
    const int64_t count = std::min(kSampleBatch, n - first);
    const Tensor size_ids =
        size_conditioning(std::vector<std::array<int64_t, 6>>(static_cast<size_t>(count), size_row), device);
    diffusion::Conditioning cond{.context = context.narrow(0, first, count),
                                 .pooled = pooled.narrow(0, first, count),
                                 .size_ids = size_ids};
    if (guided) {
      euler.guidance.scale = settings.guidance;
      euler.guidance.uncond = {
          .context = context.narrow(0, n, 1).expand({count, context.size(1), context.size(2)}).contiguous(),
          .pooled = pooled.narrow(0, n, 1).expand({count, pooled.size(1)}).contiguous(),
          .size_ids = size_ids};
    }
    Tensor x = noise.narrow(0, first, count).to(DType::F32).to(device).contiguous();
    latents.push_back(diffusion::sample_euler_discrete(denoiser, x, cond, schedule, euler).to(Device::cpu()));
  }
  return decode(latents.size() == 1 ? latents.front() : concat(latents, 0));
}

void SdxlImageSampler::unload_encoders() { encoders_->unload(); }

std::string SdxlImageSampler::describe_text() const {
  return encoders_ ? ", CLIP-L " + encoders_->clip_l.source_path() + ", CLIP-G " + encoders_->clip_g.source_path()
                   : std::string();
}

std::string SdxlImageSampler::describe_choices() const {
  std::string out = std::string(", Euler (EulerDiscreteScheduler, leading), ") +
                    (sdxl_.v_prediction ? "v" : "epsilon") + "-prediction, negative prompt \"" +
                    prompt_text(sdxl_.negative_prompt, sdxl_.trigger_word) + "\"";
  if (zeroes_negative()) out += " (zero embeddings: force_zeros_for_empty_prompt)";
  return out;
}

// ---- for a run ----

std::unique_ptr<ImageSampler> make_sdxl_sampler(const SamplerRequest& request) {
  const ModelConfig& model = request.config.model;
  const LatentDataset& dataset = request.dataset;
  const SamplerKind asked = request.config.sample.sampler;
  WICK_CHECK_KIND(Config, asked == SamplerKind::Auto || asked == SamplerKind::Euler, "sample.sampler: ",
                  sampler_name(asked), " is not available for SDXL, which samples with Euler (diffusers' "
                  "EulerDiscreteScheduler, SDXL's default): use euler or auto");
  WICK_CHECK_KIND(Config, request.config.train.noise_scheduler == NoiseScheduler::Ddpm, "train.noise_scheduler ",
                  noise_scheduler_name(request.config.train.noise_scheduler), ": SDXL samples an ε- or v-predicting "
                  "DDPM model (noise_scheduler ddpm)");
  const SdxlSamplingFiles files = sampling_files(model);
  const bool zeros_for_empty = pipeline_force_zeros(files.pipeline);

  // The dataset's stored sample prompts, when they are SDXL's embeddings; the text encoders are optional when they
  // hold every prompt of the grid and, with guidance, the negative prompt (unless that one is zeroed).
  const LatentDatasetAttributes& data = dataset.attributes();
  const bool sdxl_text = data.text_embeds_encoder == "clip-l+clip-g penultimate" &&
                         data.text_pooled_encoder == "clip-g projected";
  std::optional<SamplePrompts> stored = stored_prompts_for(dataset, sdxl_text);
  const std::string negative = prompt_text(request.config.sample.negative_prompt, request.config.trigger_word);
  const bool encodes_negative = request.config.sample.guidance != 1.0 && !(zeros_for_empty && negative.empty());
  const std::vector<std::string> not_stored = text::texts_not_stored(
      grid_texts(request, encodes_negative ? std::optional<std::string>(negative) : std::nullopt),
      request.config.trigger_word, stored);
  const std::vector<std::pair<SamplerFile, std::string>> text = text_paths(files);
  check_sampler_parts({.model = "SDXL",
                       .vae = kVae,
                       .vae_path = files.vae,
                       .text = text,
                       .where_all = "a diffusers pipeline folder as model.name_or_path, such as "
                                    "stable-diffusion-xl-base-1.0/, gives all of them",
                       .stored = &stored,
                       .not_stored = not_stored,
                       .dataset_path = dataset.path(),
                       .stored_rule = "sample.prompts and sample.negative_prompt with the trigger word put in must "
                                      "equal them byte for byte to be used without text encoders; `wick dataset "
                                      "encode --model sdxl --config` stores both"});
  const vae::VaeConfig sizes = sampler_vae_config(files.vae);
  const SamplerDataset from_data = sampler_dataset(dataset, "sdxl", kVaeNormalization, sizes, files.vae);

  auto sampler = make_naming_text_parts<SdxlImageSampler>("SDXL", text, [&] {
    return std::make_unique<SdxlImageSampler>(
        SdxlSamplerSetup{.files = files,
                         .negative_prompt = request.config.sample.negative_prompt,
                         .zeros_for_empty_negative = zeros_for_empty,
                         .v_prediction = request.config.train.prediction_type == PredictionType::V,
                         .normalization = from_data.normalization,
                         .default_height = from_data.default_height,
                         .default_width = from_data.default_width,
                         .trigger_word = request.config.trigger_word,
                         .device = request.device,
                         .keep_loaded = model.options.get_bool("keep_encoders_loaded"),
                         .stored_prompts = std::move(stored)});
  });
  if (const SdxlTextEncoders* encoders = sampler->encoders()) {
    const int64_t width = encoders->clip_l.width() + encoders->clip_g.width();
    WICK_CHECK_KIND(Config, dataset.text_dim() == 0 || dataset.text_dim() == width, dataset.path(),
                    "'s text embeddings are ", dataset.text_dim(), " wide but CLIP-L (model.clip_l_path ",
                    files.clip_l, ") and CLIP-G (model.clip_g_path ", files.clip_g, ") give ", width);
    WICK_CHECK_KIND(Config, dataset.pooled_dim() == 0 || dataset.pooled_dim() == encoders->clip_g.projection_dim(),
                    dataset.path(), "'s pooled embeddings are ", dataset.pooled_dim(),
                    " wide but CLIP-G (model.clip_g_path ", files.clip_g, ") pools to ",
                    encoders->clip_g.projection_dim());
  }
  return sampler;
}

}  // namespace wick::sdxl
