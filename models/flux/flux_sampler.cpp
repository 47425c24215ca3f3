#include "models/flux/flux_sampler.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <tuple>

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

namespace wick::flux {

using text::prompt_text;
namespace {

// Images per transformer call.
constexpr int64_t kSampleBatch = 4;

Device device_of(const Module& model) {
  auto parameters = model.named_parameters();
  return parameters.empty() ? Device::cpu() : parameters.front().second.device();
}

// The text encoders, unless stored prompts are given and a text part is not.
std::optional<FluxTextEncoders> open_encoders(const FluxSamplerSetup& setup) {
  const FluxSamplingFiles& f = setup.files;
  if (setup.stored_prompts &&
      (f.clip_l.empty() || f.t5.empty() || f.clip_tokenizer.empty() || f.t5_tokenizer.empty()))
    return std::nullopt;
  return FluxTextEncoders::from_files({.clip_l = setup.files.clip_l,
                                       .t5 = setup.files.t5,
                                       .clip_vocab = setup.files.clip_tokenizer,
                                       .t5_tokenizer = setup.files.t5_tokenizer},
                                      {.device = setup.device, .keep_loaded = setup.keep_loaded});
}

vae::VaeConfig read_vae_sizes(const FluxSamplerSetup& setup) {
  WICK_CHECK_KIND(Config, !setup.files.vae.empty(), "flux sampler: the VAE (files.vae) is not given");
  return vae::read_vae_header(setup.files.vae).config;
}

std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : separator) + item;
  return out;
}

}  // namespace

FluxSamplingFiles sampling_files(const ModelConfig& model) {
  const ModelOptions& o = model.options;
  FluxSamplingFiles files{.vae = o.get_string("vae_path"),
                          .clip_l = o.get_string("clip_l_path"),
                          .t5 = o.get_string("t5_path"),
                          .clip_tokenizer = o.get_string("clip_tokenizer_path"),
                          .t5_tokenizer = o.get_string("t5_tokenizer_path")};
  if (std::optional<std::string> root = pipeline_folder(model.name_or_path)) {
    std::error_code ec;
    auto part = [&](std::string& slot, const char* name) {
      const fs::path candidate = fs::path(*root) / name;
      if (slot.empty() && fs::exists(candidate, ec)) slot = candidate.string();
    };
    part(files.vae, "vae");
    part(files.vae, "ae.safetensors");
    part(files.clip_l, "text_encoder");
    part(files.t5, "text_encoder_2");
    part(files.clip_tokenizer, "tokenizer");
    part(files.t5_tokenizer, "tokenizer_2");
    files.pipeline = *root;
  }
  return files;
}

std::vector<double> flux_sigmas(int64_t steps, int64_t latent_height, int64_t latent_width, bool shift) {
  WICK_CHECK(latent_height > 0 && latent_width > 0, "flux_sigmas: latent size must be positive, got ", latent_height,
             " x ", latent_width);
  diffusion::FlowSamplerConfig config;
  config.n_steps = steps;
  config.shift = shift ? diffusion::SigmaShift::Resolution : diffusion::SigmaShift::None;
  return diffusion::flow_sigmas(config, {1, 1, latent_height, latent_width});
}

// ---- FluxImageSampler ----

FluxImageSampler::FluxImageSampler(FluxSamplerSetup setup)
    : setup_(std::move(setup)), encoders_(open_encoders(setup_)), vae_sizes_(read_vae_sizes(setup_)) {
  WICK_CHECK_KIND(Config, setup_.t5_length >= 0, "flux sampler: t5_length must be >= 0, got ", setup_.t5_length);
  if (const std::optional<SamplePrompts>& stored = setup_.stored_prompts) {
    const auto k = static_cast<int64_t>(stored->captions.size());
    WICK_CHECK(stored->embeds.dim() == 3 && stored->embeds.size(0) == k && stored->pooled.dim() == 2 &&
                   stored->pooled.size(0) == k,
               "flux sampler: stored prompts must be embeds [K, L, D] and pooled [K, P] for K captions, got ", k,
               " captions, ", stored->embeds.describe(), ", ", stored->pooled.describe());
    for (int64_t row = 0; row < k; ++row) stored_row_.emplace(stored->captions[static_cast<size_t>(row)], row);
  }
}

bool FluxImageSampler::is_stored(const std::string& prompt, int64_t t5_length) const {
  return setup_.stored_prompts && setup_.stored_prompts->embeds.size(1) == t5_length &&
         stored_row_.count(prompt_text(prompt, setup_.trigger_word)) > 0;
}

std::string FluxImageSampler::missing_text_parts() const {
  const FluxSamplingFiles& f = setup_.files;
  std::vector<std::string> missing;
  if (f.clip_l.empty()) missing.push_back("CLIP-L (model.clip_l_path)");
  if (f.t5.empty()) missing.push_back("T5-XXL (model.t5_path)");
  if (f.clip_tokenizer.empty()) missing.push_back("the CLIP tokenizer (model.clip_tokenizer_path)");
  if (f.t5_tokenizer.empty()) missing.push_back("the T5 tokenizer (model.t5_tokenizer_path)");
  return join(missing, ", ");
}

int64_t FluxImageSampler::t5_length_for(const FluxTransformer& model) const {
  if (setup_.t5_length > 0) return setup_.t5_length;
  return model.config().guidance_embed ? 512 : 256;
}

void FluxImageSampler::check_fits(const FluxTransformer& model) const {
  const FluxConfig& c = model.config();
  WICK_CHECK_KIND(Config, c.latent_channels() == vae_sizes_.z_channels, "the Flux model takes ", c.latent_channels(),
                  "-channel latents (img_in ", c.in_channels, " = channels x 2 x 2) but the VAE ", setup_.files.vae,
                  " has ", vae_sizes_.z_channels);
  if (encoders_) {
    WICK_CHECK_KIND(Config, c.context_dim == encoders_->t5.d_model(), "the Flux model takes ", c.context_dim,
                    "-wide text (txt_in) but the T5 encoder ", setup_.files.t5, " is ", encoders_->t5.d_model(),
                    " wide");
    WICK_CHECK_KIND(Config, c.vec_dim == encoders_->clip_l.width(), "the Flux model takes a ", c.vec_dim,
                    "-wide pooled vector (vector_in) but CLIP-L ", setup_.files.clip_l, " is ",
                    encoders_->clip_l.width(), " wide");
  }
  if (const std::optional<SamplePrompts>& stored = setup_.stored_prompts) {
    WICK_CHECK_KIND(Config, c.context_dim == stored->embeds.size(2), "the Flux model takes ", c.context_dim,
                    "-wide text (txt_in) but the stored sample prompts are ", stored->embeds.size(2), " wide");
    WICK_CHECK_KIND(Config, c.vec_dim == stored->pooled.size(1), "the Flux model takes a ", c.vec_dim,
                    "-wide pooled vector (vector_in) but the stored sample prompts' is ", stored->pooled.size(1),
                    " wide");
  }
}

Tensor FluxImageSampler::generate(DiffusionModel& model, const std::vector<std::string>& prompts,
                                  const SampleSettings& settings) {
  auto* flux = dynamic_cast<FluxTransformer*>(&model);
  WICK_CHECK_KIND(Config, flux != nullptr, "the Flux sampler needs a Flux model, got ", model.summary());
  const int64_t height = settings.height > 0 ? settings.height : setup_.default_height;
  const int64_t width = settings.width > 0 ? settings.width : setup_.default_width;
  const int64_t f = vae_sizes_.downscale(), multiple = 2 * f;
  auto near = [multiple](int64_t v) { return std::max<int64_t>(multiple, (v + multiple / 2) / multiple * multiple); };
  WICK_CHECK_KIND(Config, height > 0 && width > 0, "flux sampler: no image size (give sample.width and sample.height)");
  WICK_CHECK_KIND(Config, height % multiple == 0 && width % multiple == 0, "image size ", width, " x ", height,
                  " (sample.width x sample.height): Flux images must be multiples of ", multiple,
                  " pixels (the VAE's ", f, " x the 2 x 2 patches); the nearest are ", near(width), " x ",
                  near(height));
  const auto n = static_cast<int64_t>(prompts.size());
  if (n == 0) return Tensor::empty({0, vae_sizes_.out_channels, height, width}, DType::F32);
  Tensor noise = sample_noise({vae_sizes_.z_channels, height / f, width / f}, 0, n, settings.seed, device_of(*flux));
  return generate_from_noise(*flux, prompts, noise, settings);
}

Tensor FluxImageSampler::generate_from_noise(FluxTransformer& model, const std::vector<std::string>& prompts,
                                             const Tensor& noise, const SampleSettings& settings) {
  const auto n = static_cast<int64_t>(prompts.size());
  WICK_CHECK(noise.dim() == 4 && noise.size(0) == n && noise.size(1) == vae_sizes_.z_channels &&
                 noise.size(2) % 2 == 0 && noise.size(3) % 2 == 0,
             "flux sampler: noise must be [", n, ", ", vae_sizes_.z_channels, ", h, w] with h and w even, got ",
             noise.describe());
  WICK_CHECK_KIND(Config, settings.steps >= 1, "flux sampler: steps must be >= 1, got ", settings.steps);
  WICK_CHECK_KIND(Config, settings.guidance >= 0, "flux sampler: guidance must be >= 0, got ", settings.guidance);
  check_fits(model);
  const Device device = device_of(model);
  EvalModeGuard eval_mode(model);
  autograd::NoGradGuard no_grad;

  // Each distinct prompt once: its stored row when the dataset holds it, else the encoders' output.
  const int64_t t5_length = t5_length_for(model);
  std::vector<std::string> texts;
  for (const std::string& prompt : prompts) texts.push_back(prompt_text(prompt, setup_.trigger_word));
  const text::PromptPlan plan = text::plan_prompts(texts, [&](const std::string& text) -> std::optional<int64_t> {
    if (!is_stored(text, t5_length)) return std::nullopt;
    return stored_row_.at(text);
  });
  if (!plan.to_encode.empty() && !encoders_) {
    const int64_t stored_length = setup_.stored_prompts->embeds.size(1);
    const std::string length_note = stored_length == t5_length ? std::string()
                                                                : ", made with " + std::to_string(stored_length) +
                                                                      " T5 tokens, not " + std::to_string(t5_length);
    WICK_FAIL(Config, "the prompt \"", plan.to_encode.front(), "\" is not among the sample prompts stored in the dataset (",
              text::quoted_captions(*setup_.stored_prompts), length_note,
              "), so it needs the text encoders, and these are not given: ", missing_text_parts(),
              " (a diffusers pipeline folder as model.name_or_path gives all of them; wick sample takes "
              "--set model.clip_l_path=... and the like)");
  }
  Tensor context, pooled;
  {
    // The table of distinct prompts' embeddings, f32 on the CPU, then each prompt's row of it.
    text::PromptEmbeddings encoded;
    if (!plan.to_encode.empty()) encoded = encode_flux_prompts(*encoders_, plan.to_encode, {.t5_length = t5_length});
    std::tie(context, pooled) =
        text::gather_prompts(plan, setup_.stored_prompts ? &*setup_.stored_prompts : nullptr, encoded);
    context = context.to(device);
    pooled = pooled.to(device);
  }

  // Euler over BFL's schedule; dev takes the guidance as an input (one forward per step).
  const bool dev = model.config().guidance_embed;
  diffusion::FlowSamplerConfig flow;
  flow.n_steps = settings.steps;
  flow.shift = dev ? diffusion::SigmaShift::Resolution : diffusion::SigmaShift::None;
  const diffusion::Denoiser denoiser = model_denoiser(model, NoiseScheduler::FlowMatch);
  std::vector<Tensor> latents;
  for (int64_t first = 0; first < n; first += kSampleBatch) {
    const int64_t count = std::min(kSampleBatch, n - first);
    diffusion::Conditioning cond{.context = context.narrow(0, first, count), .pooled = pooled.narrow(0, first, count)};
    if (dev)
      cond.guidance = Tensor::from_vector<float>(
          std::vector<float>(static_cast<size_t>(count), static_cast<float>(settings.guidance)), {count}, device);
    Tensor x = noise.narrow(0, first, count).to(DType::F32).to(device).contiguous();
    latents.push_back(diffusion::sample_flow_euler(denoiser, x, cond, flow).to(DType::F32).to(Device::cpu()));
  }
  return decode(latents.size() == 1 ? latents.front() : concat(latents, 0));
}

Tensor FluxImageSampler::decode(const Tensor& latents) {
  std::shared_ptr<vae::AutoencoderKL> model = vae_;
  if (!model) {
    const vae::LatentNormalization& norm = setup_.normalization;
    model = vae::load_vae(setup_.files.vae, {.family = vae::VaeFamily::Flux,
                                             .scaling_factor = norm.scaling_factor,
                                             .shift_factor = norm.shift_factor,
                                             .dtype = setup_.device.is_cuda() ? DType::BF16 : DType::F32,
                                             .device = setup_.device})
                .model;
    if (setup_.keep_loaded) vae_ = model;
  }
  return vae::decode_to_images(*model, latents, setup_.normalization, setup_.device);
}

void FluxImageSampler::unload() {
  vae_.reset();
  if (encoders_) {
    encoders_->clip_l.unload();
    encoders_->t5.unload();
  }
}

std::string FluxImageSampler::describe() const {
  std::string out = "Flux: VAE " + setup_.files.vae;
  if (encoders_) out += ", CLIP-L " + encoders_->clip_l.source_path() + ", T5 " + encoders_->t5.source_path();
  out += ", T5 length " +
         (setup_.t5_length > 0 ? std::to_string(setup_.t5_length) : std::string("512 (dev) / 256 (schnell)"));
  if (setup_.stored_prompts) {
    const size_t k = setup_.stored_prompts->captions.size();
    out += "; the embeddings of the " + std::to_string(k) + " sample prompt" + (k == 1 ? "" : "s") +
           " stored in the dataset";
    if (!encoders_) out += ", no text encoders (other prompts need " + missing_text_parts() + ")";
  }
  return out;
}

// ---- for a run ----

std::unique_ptr<ImageSampler> make_flux_sampler(const SamplerRequest& request) {
  const ModelConfig& model = request.config.model;
  const LatentDataset& dataset = request.dataset;
  const SamplerKind asked = request.config.sample.sampler;
  WICK_CHECK_KIND(Config, asked == SamplerKind::Auto || asked == SamplerKind::Euler, "sample.sampler: ",
                  sampler_name(asked), " does not fit Flux, a rectified-flow model (use euler or auto)");
  const FluxSamplingFiles files = sampling_files(model);

  // The T5 length: the key, else what the dataset's embeddings were made with, else the variant's.
  const LatentDatasetAttributes& data = dataset.attributes();
  const int64_t configured = model.options.get_int("t5_length");
  const int64_t recorded = data.text_embeds_encoder.rfind("t5", 0) == 0 ? data.text_max_length : 0;
  WICK_CHECK_KIND(Config, configured == 0 || recorded == 0 || configured == recorded, "model.t5_length is ", configured,
                  " but the text embeddings of ", dataset.path(), " were made with ", recorded,
                  " T5 tokens (text_max_length); Flux attends to T5's padding, so train and sample with the same "
                  "length (set model.t5_length: ", recorded, " or leave it out)");
  const int64_t t5_length = configured > 0 ? configured : recorded;

  // The dataset's stored sample prompts, when they are Flux's (T5 states, CLIP-L pooled) at this T5 length; the
  // text encoders are optional when they hold every prompt of the grid.
  std::optional<SamplePrompts> stored;
  if (recorded > 0 && data.text_pooled_encoder == "clip-l") stored = dataset.sample_prompts();
  if (stored && (stored->embeds.size(1) != t5_length || stored->captions.empty())) stored.reset();
  std::vector<std::string> grid = request.config.sample.prompts;
  if (request.config.sample.n_per_class > 0)
    grid.insert(grid.end(), data.label_names.begin(), data.label_names.end());
  const std::vector<std::string> not_stored = text::texts_not_stored(grid, request.config.trigger_word, stored);
  const bool text_optional = stored && not_stored.empty();

  std::vector<std::string> missing;
  if (files.vae.empty())
    missing.push_back("the VAE (model.vae_path: ae.safetensors, a diffusers vae/ folder or a pipeline folder)");
  if (!text_optional) {
    if (files.clip_l.empty())
      missing.push_back("CLIP-L (model.clip_l_path: clip_l.safetensors or a text_encoder/ folder)");
    if (files.t5.empty())
      missing.push_back("T5-XXL (model.t5_path: t5xxl_fp16.safetensors or a text_encoder_2/ folder)");
    if (files.clip_tokenizer.empty())
      missing.push_back("the CLIP tokenizer (model.clip_tokenizer_path: a tokenizer/ folder with vocab.json and "
                        "merges.txt, or open_clip's bpe_simple_vocab_16e6.txt.gz)");
    if (files.t5_tokenizer.empty())
      missing.push_back("the T5 tokenizer (model.t5_tokenizer_path: spiece.model or a tokenizer_2/ folder)");
  }
  std::string why_text;  // why the text encoders are needed although the dataset stores sample prompts
  if (!text_optional && stored && missing.size() > (files.vae.empty() ? 1u : 0u))
    why_text = "; the sample prompts stored in " + dataset.path() + " do not hold \"" + not_stored.front() +
               "\" (sample.prompts with the trigger word put in must equal them byte for byte to be used without "
               "text encoders)";
  WICK_CHECK_KIND(Config, missing.empty(), "Flux sample images need ", join(missing, "; "), ", and ",
                  missing.size() == 1 ? "it is" : "they are",
                  " not given (a diffusers pipeline folder as model.name_or_path, such as FLUX.1-dev/, gives all "
                  "five)", why_text);
  check_files_exist({
      {"vae_path", &files.vae},
      {"clip_l_path", &files.clip_l},
      {"t5_path", &files.t5},
      {"clip_tokenizer_path", &files.clip_tokenizer},
      {"t5_tokenizer_path", &files.t5_tokenizer}});
  const vae::VaeConfig sizes = sampler_vae_config(files.vae);

  FluxSamplerSetup setup{.files = files,
                         .t5_length = t5_length,
                         .normalization = vae::latent_normalization(vae::VaeFamily::Flux),
                         .trigger_word = request.config.trigger_word,
                         .device = request.device,
                         .keep_loaded = model.options.get_bool("keep_encoders_loaded"),
                         .stored_prompts = std::move(stored)};
  // The latents the model learned were normalized with the dataset's factors.
  if (data.model_family == "flux") setup.normalization = {data.vae_scaling_factor, data.vae_shift_factor};
  WICK_CHECK_KIND(Data, !dataset.buckets().empty(), dataset.path(), ": the dataset has no buckets");
  setup.default_height = dataset.buckets().front().height * sizes.downscale();
  setup.default_width = dataset.buckets().front().width * sizes.downscale();

  std::unique_ptr<FluxImageSampler> sampler;
  try {
    sampler = std::make_unique<FluxImageSampler>(setup);
  } catch (const WickError& error) {
    throw WickError(error.kind(), "Flux text encoders (model.clip_l_path " + files.clip_l + ", model.t5_path " +
                                      files.t5 + ", model.clip_tokenizer_path " + files.clip_tokenizer +
                                      ", model.t5_tokenizer_path " + files.t5_tokenizer + "): " + message_of(error));
  }
  WICK_CHECK_KIND(Config, data.latent_channels == 0 || data.latent_channels == sizes.z_channels, dataset.path(),
                  " holds ", data.latent_channels, "-channel latents but the VAE (model.vae_path ", files.vae,
                  ") has ", sizes.z_channels);
  if (const FluxTextEncoders* encoders = sampler->encoders()) {
    WICK_CHECK_KIND(Config, dataset.text_dim() == 0 || dataset.text_dim() == encoders->t5.d_model(), dataset.path(),
                    "'s text embeddings are ", dataset.text_dim(), " wide but the T5 encoder (model.t5_path ",
                    files.t5, ") is ", encoders->t5.d_model(), " wide");
    WICK_CHECK_KIND(Config, dataset.pooled_dim() == 0 || dataset.pooled_dim() == encoders->clip_l.width(),
                    dataset.path(), "'s pooled embeddings are ", dataset.pooled_dim(),
                    " wide but CLIP-L (model.clip_l_path ", files.clip_l, ") is ", encoders->clip_l.width(), " wide");
  }
  return sampler;
}

}  // namespace wick::flux
