#include "models/sdxl/sdxl_sampler.h"

#include <algorithm>
#include <array>
#include <filesystem>

#include "engine/autograd/grad_mode.h"
#include "engine/data/captions.h"
#include "models/diffusion/euler_discrete.h"
#include "models/diffusion/generate.h"
#include "models/sampler_files.h"
#include "models/text/stored_prompts.h"
#include "models/vae/vae_weights.h"
#include "models/weights/pipeline_folder.h"
#include "runtime/error.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/index.h"
#include "runtime/ops/join.h"

namespace fs = std::filesystem;

namespace wick::sdxl {

using text::prompt_text;
namespace {

// Images per UNet call (twice as many rows with guidance).
constexpr int64_t kSampleBatch = 4;

Device device_of(const Module& model) {
  auto parameters = model.named_parameters();
  return parameters.empty() ? Device::cpu() : parameters.front().second.device();
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

vae::VaeConfig read_vae_sizes(const SdxlSamplerSetup& setup) {
  WICK_CHECK_KIND(Config, !setup.files.vae.empty(), "sdxl sampler: the VAE (files.vae) is not given");
  return vae::read_vae_header(setup.files.vae).config;
}

std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : separator) + item;
  return out;
}

}  // namespace

SdxlSamplingFiles sampling_files(const ModelConfig& model) {
  const ModelOptions& o = model.options;
  SdxlSamplingFiles files{.vae = o.get_string("vae_path"),
                          .clip_l = o.get_string("clip_l_path"),
                          .clip_g = o.get_string("clip_g_path"),
                          .clip_tokenizer = o.get_string("clip_tokenizer_path"),
                          .clip_g_tokenizer = o.get_string("clip_g_tokenizer_path")};
  auto fill = [](std::string& slot, const std::string& value) {
    if (slot.empty()) slot = value;
  };
  if (std::optional<std::string> root = pipeline_folder(model.name_or_path)) {
    fill(files.vae, pipeline_part(*root, {"vae"}));
    fill(files.clip_l, pipeline_part(*root, {"text_encoder"}));
    fill(files.clip_g, pipeline_part(*root, {"text_encoder_2"}));
    fill(files.clip_tokenizer, pipeline_part(*root, {"tokenizer"}));
    fill(files.clip_g_tokenizer, pipeline_part(*root, {"tokenizer_2"}));
    files.pipeline = *root;
  }
  // sd_xl_base_1.0.safetensors: the VAE under first_stage_model., the encoders under conditioner.embedders.
  const std::string& file = model.name_or_path;
  if (files.vae.empty() && file_has_prefix(file, "first_stage_model.")) files.vae = file;
  if (files.clip_l.empty() && file_has_prefix(file, "conditioner.embedders.0.transformer.")) files.clip_l = file;
  if (files.clip_g.empty() && file_has_prefix(file, "conditioner.embedders.1.model.")) files.clip_g = file;
  return files;
}

// ---- SdxlImageSampler ----

SdxlImageSampler::SdxlImageSampler(SdxlSamplerSetup setup)
    : setup_(std::move(setup)), encoders_(open_encoders(setup_)), vae_sizes_(read_vae_sizes(setup_)) {
  if (const std::optional<SamplePrompts>& stored = setup_.stored_prompts) {
    const auto k = static_cast<int64_t>(stored->captions.size());
    WICK_CHECK(stored->embeds.dim() == 3 && stored->embeds.size(0) == k && stored->pooled.dim() == 2 &&
                   stored->pooled.size(0) == k,
               "sdxl sampler: stored prompts must be embeds [K, L, D] and pooled [K, P] for K captions, got ", k,
               " captions, ", stored->embeds.describe(), ", ", stored->pooled.describe());
    for (int64_t row = 0; row < k; ++row) stored_row_.emplace(stored->captions[static_cast<size_t>(row)], row);
  }
}

bool SdxlImageSampler::zeroes_negative() const {
  return setup_.zeros_for_empty_negative && prompt_text(setup_.negative_prompt, setup_.trigger_word).empty();
}

bool SdxlImageSampler::is_stored(const std::string& prompt) const {
  if (!setup_.stored_prompts || stored_row_.count(prompt_text(prompt, setup_.trigger_word)) == 0) return false;
  // Rows of one batch must have one length: with encoders, stored rows must be as long as encoded ones.
  if (!encoders_) return true;
  return setup_.stored_prompts->embeds.size(1) == encoders_->clip_l_tokenizer.context_length();
}

std::string SdxlImageSampler::missing_text_parts() const {
  const SdxlSamplingFiles& f = setup_.files;
  std::vector<std::string> missing;
  if (f.clip_l.empty()) missing.push_back("CLIP-L (model.clip_l_path)");
  if (f.clip_g.empty()) missing.push_back("CLIP-G (model.clip_g_path)");
  if (f.clip_tokenizer.empty()) missing.push_back("the CLIP tokenizer (model.clip_tokenizer_path)");
  return join(missing, ", ");
}

void SdxlImageSampler::check_fits(const Unet& model) const {
  const UnetConfig& c = model.config();
  WICK_CHECK_KIND(Config, c.adm_in_channels > 0, "the SDXL sampler needs a UNet with SDXL's added conditioning "
                  "(label_emb: the pooled text and the size values), and ", model.summary(), " has none (an SD 1.x / "
                  "2.x UNet, which wick trains but does not sample)");
  WICK_CHECK_KIND(Config, c.in_channels == vae_sizes_.z_channels, "the SDXL UNet takes ", c.in_channels,
                  "-channel latents (input_blocks.0.0) but the VAE ", setup_.files.vae, " has ",
                  vae_sizes_.z_channels);
  if (encoders_) {
    const int64_t width = encoders_->clip_l.width() + encoders_->clip_g.width();
    WICK_CHECK_KIND(Config, c.context_dim == width, "the SDXL UNet takes ", c.context_dim,
                    "-wide text (attn2.to_k) but CLIP-L ", setup_.files.clip_l, " and CLIP-G ", setup_.files.clip_g,
                    " give ", encoders_->clip_l.width(), " + ", encoders_->clip_g.width(), " = ", width);
    WICK_CHECK_KIND(Config, c.pooled_dim() == encoders_->clip_g.projection_dim(), "the SDXL UNet takes a ",
                    c.pooled_dim(), "-wide pooled vector (label_emb) but CLIP-G ", setup_.files.clip_g,
                    " pools to ", encoders_->clip_g.projection_dim());
  }
  if (const std::optional<SamplePrompts>& stored = setup_.stored_prompts) {
    WICK_CHECK_KIND(Config, c.context_dim == stored->embeds.size(2), "the SDXL UNet takes ", c.context_dim,
                    "-wide text (attn2.to_k) but the stored sample prompts are ", stored->embeds.size(2), " wide");
    WICK_CHECK_KIND(Config, c.pooled_dim() == stored->pooled.size(1), "the SDXL UNet takes a ", c.pooled_dim(),
                    "-wide pooled vector (label_emb) but the stored sample prompts' is ", stored->pooled.size(1),
                    " wide");
  }
}

Tensor SdxlImageSampler::generate(DiffusionModel& model, const std::vector<std::string>& prompts,
                                  const SampleSettings& settings) {
  auto* unet = dynamic_cast<Unet*>(&model);
  WICK_CHECK_KIND(Config, unet != nullptr, "the SDXL sampler needs an SDXL UNet, got ", model.summary());
  const int64_t height = settings.height > 0 ? settings.height : setup_.default_height;
  const int64_t width = settings.width > 0 ? settings.width : setup_.default_width;
  const int64_t f = vae_sizes_.downscale(), multiple = f * unet->config().size_multiple();
  auto near = [multiple](int64_t v) { return std::max<int64_t>(multiple, (v + multiple / 2) / multiple * multiple); };
  WICK_CHECK_KIND(Config, height > 0 && width > 0,
                  "sdxl sampler: no image size (give sample.width and sample.height)");
  WICK_CHECK_KIND(Config, height % multiple == 0 && width % multiple == 0, "image size ", width, " x ", height,
                  " (sample.width x sample.height): SDXL images must be multiples of ", multiple, " pixels (the VAE's ",
                  f, " x the UNet's ", unet->config().size_multiple(), "); the nearest are ", near(width), " x ",
                  near(height));
  const auto n = static_cast<int64_t>(prompts.size());
  if (n == 0) return Tensor::empty({0, vae_sizes_.out_channels, height, width}, DType::F32);
  Tensor noise = sample_noise({vae_sizes_.z_channels, height / f, width / f}, 0, n, settings.seed, device_of(*unet));
  return generate_from_noise(*unet, prompts, noise, settings);
}

std::pair<Tensor, Tensor> SdxlImageSampler::embed(const std::vector<std::string>& texts) {
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
  if (!plan.to_encode.empty()) encoded = encode_sdxl_prompts(*encoders_, plan.to_encode);
  return text::gather_prompts(plan, setup_.stored_prompts ? &*setup_.stored_prompts : nullptr, encoded);
}

Tensor SdxlImageSampler::generate_from_noise(Unet& model, const std::vector<std::string>& prompts, const Tensor& noise,
                                             const SampleSettings& settings) {
  const auto n = static_cast<int64_t>(prompts.size());
  WICK_CHECK(noise.dim() == 4 && noise.size(0) == n && noise.size(1) == vae_sizes_.z_channels,
             "sdxl sampler: noise must be [", n, ", ", vae_sizes_.z_channels, ", h, w], got ", noise.describe());
  WICK_CHECK_KIND(Config, settings.steps >= 1, "sdxl sampler: steps must be >= 1, got ", settings.steps);
  WICK_CHECK_KIND(Config, settings.guidance >= 0, "sdxl sampler: guidance must be >= 0, got ", settings.guidance);
  check_fits(model);
  model.check_latent_size(noise.size(2), noise.size(3));
  const int64_t f = vae_sizes_.downscale(), height = noise.size(2) * f, width = noise.size(3) * f;
  if (n == 0) return Tensor::empty({0, vae_sizes_.out_channels, height, width}, DType::F32);
  const diffusion::EulerDiscreteSchedule schedule = diffusion::euler_discrete_schedule(settings.steps);
  const Device device = device_of(model);
  EvalModeGuard eval_mode(model);
  autograd::NoGradGuard no_grad;

  // The prompts' rows, then the negative prompt's (one row, repeated per batch), in one table. The zeroed empty
  // negative is a zero row of its own (a prompt "" is still encoded).
  const bool guided = settings.guidance != 1.0, zero_negative = guided && zeroes_negative();
  std::vector<std::string> texts;
  for (const std::string& prompt : prompts) texts.push_back(prompt_text(prompt, setup_.trigger_word));
  if (guided && !zero_negative) texts.push_back(prompt_text(setup_.negative_prompt, setup_.trigger_word));
  auto [context, pooled] = embed(texts);
  if (zero_negative) {
    context = concat({context, zeros({1, context.size(1), context.size(2)}, DType::F32)}, 0);
    pooled = concat({pooled, zeros({1, pooled.size(1)}, DType::F32)}, 0);
  }
  context = context.to(device);
  pooled = pooled.to(device);

  // diffusers' _get_add_time_ids: original size = target size = the image's (H, W), crop (0, 0); the same for the
  // negative prompt.
  const std::array<int64_t, 6> size_row = {height, width, 0, 0, height, width};

  diffusion::EulerDiscreteConfig euler{.v_prediction = setup_.v_prediction};
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

Tensor SdxlImageSampler::decode(const Tensor& latents) {
  std::shared_ptr<vae::AutoencoderKL> model = vae_;
  if (!model) {
    const vae::LatentNormalization& norm = setup_.normalization;
    model = vae::load_vae(setup_.files.vae, {.family = vae::VaeFamily::Sdxl,
                                             .scaling_factor = norm.scaling_factor,
                                             .shift_factor = norm.shift_factor,
                                             .dtype = setup_.device.is_cuda() ? DType::BF16 : DType::F32,
                                             .device = setup_.device})
                .model;
    if (setup_.keep_loaded) vae_ = model;
  }
  return vae::decode_to_images(*model, latents, setup_.normalization, setup_.device);
}

void SdxlImageSampler::unload() {
  vae_.reset();
  if (encoders_) {
    encoders_->clip_l.unload();
    encoders_->clip_g.unload();
  }
}

std::string SdxlImageSampler::describe() const {
  std::string out = "SDXL: VAE " + setup_.files.vae;
  if (encoders_) out += ", CLIP-L " + encoders_->clip_l.source_path() + ", CLIP-G " + encoders_->clip_g.source_path();
  out += std::string(", Euler (EulerDiscreteScheduler, leading), ") + (setup_.v_prediction ? "v" : "epsilon") +
         "-prediction, negative prompt \"" + prompt_text(setup_.negative_prompt, setup_.trigger_word) + "\"";
  if (zeroes_negative()) out += " (zero embeddings: force_zeros_for_empty_prompt)";
  if (setup_.stored_prompts) {
    const size_t k = setup_.stored_prompts->captions.size();
    out += "; the embeddings of the " + std::to_string(k) + " sample prompt" + (k == 1 ? "" : "s") +
           " stored in the dataset";
    if (!encoders_) out += ", no text encoders (other prompts need " + missing_text_parts() + ")";
  }
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
  std::optional<SamplePrompts> stored;
  if (sdxl_text) stored = dataset.sample_prompts();
  if (stored && stored->captions.empty()) stored.reset();
  std::vector<std::string> grid = request.config.sample.prompts;
  if (request.config.sample.n_per_class > 0)
    grid.insert(grid.end(), data.label_names.begin(), data.label_names.end());
  const std::string negative = prompt_text(request.config.sample.negative_prompt, request.config.trigger_word);
  if (request.config.sample.guidance != 1.0 && !(zeros_for_empty && negative.empty())) grid.push_back(negative);
  const std::vector<std::string> not_stored = text::texts_not_stored(grid, request.config.trigger_word, stored);
  const bool text_optional = stored && not_stored.empty();

  std::vector<std::string> missing;
  if (files.vae.empty())
    missing.push_back("the VAE (model.vae_path: a diffusers vae/ folder, a VAE file or an SDXL single file)");
  if (!text_optional) {
    if (files.clip_l.empty())
      missing.push_back("CLIP-L (model.clip_l_path: a text_encoder/ folder, a CLIP-L file or an SDXL single file)");
    if (files.clip_g.empty())
      missing.push_back("CLIP-G (model.clip_g_path: a text_encoder_2/ folder, a bigG file or an SDXL single file)");
    if (files.clip_tokenizer.empty())
      missing.push_back("the CLIP tokenizer (model.clip_tokenizer_path: a tokenizer/ folder with vocab.json and "
                        "merges.txt, or open_clip's bpe_simple_vocab_16e6.txt.gz)");
  }
  std::string why_text;  // why the text encoders are needed although the dataset stores sample prompts
  if (!text_optional && stored && missing.size() > (files.vae.empty() ? 1u : 0u))
    why_text = "; the sample prompts stored in " + dataset.path() + " do not hold \"" + not_stored.front() +
               "\" (sample.prompts and sample.negative_prompt with the trigger word put in must equal them byte for "
               "byte to be used without text encoders; `wick dataset encode --model sdxl --config` stores both)";
  WICK_CHECK_KIND(Config, missing.empty(), "SDXL sample images need ", join(missing, "; "), ", and ",
                  missing.size() == 1 ? "it is" : "they are",
                  " not given (a diffusers pipeline folder as model.name_or_path, such as "
                  "stable-diffusion-xl-base-1.0/, gives all of them)",
                  why_text);
  check_files_exist({
      {"vae_path", &files.vae},
      {"clip_l_path", &files.clip_l},
      {"clip_g_path", &files.clip_g},
      {"clip_tokenizer_path", &files.clip_tokenizer},
      {"clip_g_tokenizer_path", &files.clip_g_tokenizer}});
  const vae::VaeConfig sizes = sampler_vae_config(files.vae);

  SdxlSamplerSetup setup{.files = files,
                         .negative_prompt = request.config.sample.negative_prompt,
                         .zeros_for_empty_negative = zeros_for_empty,
                         .v_prediction = request.config.train.prediction_type == PredictionType::V,
                         .normalization = vae::latent_normalization(vae::VaeFamily::Sdxl),
                         .trigger_word = request.config.trigger_word,
                         .device = request.device,
                         .keep_loaded = model.options.get_bool("keep_encoders_loaded"),
                         .stored_prompts = std::move(stored)};
  // The latents the model learned were normalized with the dataset's factors.
  if (data.model_family == "sdxl") setup.normalization = {data.vae_scaling_factor, data.vae_shift_factor};
  WICK_CHECK_KIND(Data, !dataset.buckets().empty(), dataset.path(), ": the dataset has no buckets");
  setup.default_height = dataset.buckets().front().height * sizes.downscale();
  setup.default_width = dataset.buckets().front().width * sizes.downscale();

  std::unique_ptr<SdxlImageSampler> sampler;
  try {
    sampler = std::make_unique<SdxlImageSampler>(setup);
  } catch (const WickError& error) {
    throw WickError(error.kind(), "SDXL text encoders (model.clip_l_path " + files.clip_l + ", model.clip_g_path " +
                                      files.clip_g + ", model.clip_tokenizer_path " + files.clip_tokenizer +
                                      "): " + message_of(error));
  }
  WICK_CHECK_KIND(Config, data.latent_channels == 0 || data.latent_channels == sizes.z_channels, dataset.path(),
                  " holds ", data.latent_channels, "-channel latents but the VAE (model.vae_path ", files.vae,
                  ") has ", sizes.z_channels);
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
