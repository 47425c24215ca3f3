#include "models/flux/flux_sampler.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "engine/autograd/grad_mode.h"
#include "engine/data/captions.h"
#include "models/diffusion/generate.h"
#include "models/diffusion/samplers.h"
#include "models/text/stored_prompts.h"
#include "runtime/error.h"
#include "runtime/ops/join.h"

namespace wick::flux {

using text::prompt_text;
namespace {

// The files a Flux run samples with, by config key.
const SamplerFile kVae{.label = "the VAE",
                       .key = "vae_path",
                       .hint = "ae.safetensors, a diffusers vae/ folder or a pipeline folder",
                       .pipeline_parts = {"vae", "ae.safetensors"}};
const std::vector<SamplerFile>& text_files() {
  static const std::vector<SamplerFile> files = {
      {.label = "CLIP-L",
       .key = "clip_l_path",
       .hint = "clip_l.safetensors or a text_encoder/ folder",
       .pipeline_parts = {"text_encoder"}},
      {.label = "T5-XXL",
       .key = "t5_path",
       .hint = "t5xxl_fp16.safetensors or a text_encoder_2/ folder",
       .pipeline_parts = {"text_encoder_2"}},
      {.label = "the CLIP tokenizer",
       .key = "clip_tokenizer_path",
       .hint = "a tokenizer/ folder with vocab.json and merges.txt, or open_clip's bpe_simple_vocab_16e6.txt.gz",
       .pipeline_parts = {"tokenizer"}},
      {.label = "the T5 tokenizer",
       .key = "t5_tokenizer_path",
       .hint = "spiece.model or a tokenizer_2/ folder",
       .pipeline_parts = {"tokenizer_2"}},
  };
  return files;
}

std::vector<std::pair<SamplerFile, std::string>> text_paths(const FluxSamplingFiles& f) {
  const std::vector<SamplerFile>& files = text_files();
  return {{files[0], f.clip_l}, {files[1], f.t5}, {files[2], f.clip_tokenizer}, {files[3], f.t5_tokenizer}};
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

}  // namespace

FluxSamplingFiles sampling_files(const ModelConfig& model) {
  std::vector<SamplerFile> files = text_files();
  files.push_back(kVae);
  std::string pipeline;
  std::map<std::string, std::string> paths = resolve_sampler_files(model, files, &pipeline);
  return {.vae = paths["vae_path"],
          .clip_l = paths["clip_l_path"],
          .t5 = paths["t5_path"],
          .clip_tokenizer = paths["clip_tokenizer_path"],
          .t5_tokenizer = paths["t5_tokenizer_path"],
          .pipeline = pipeline};
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
    : LatentImageSampler(latent_setup_of(setup, "Flux", {kVaeNormalization, "flux"}, text_paths(setup.files))),
      flux_(std::move(setup)), encoders_(open_encoders(flux_)) {
  WICK_CHECK_KIND(Config, flux_.t5_length >= 0, "flux sampler: t5_length must be >= 0, got ", flux_.t5_length);
}

bool FluxImageSampler::is_stored(const std::string& prompt, int64_t t5_length) const {
  return holds(prompt) && stored()->embeds.size(1) == t5_length;
}

int64_t FluxImageSampler::t5_length_for(const FluxTransformer& model) const {
  if (flux_.t5_length > 0) return flux_.t5_length;
  return model.config().guidance_embed ? 512 : 256;
}

void FluxImageSampler::check_fits(const FluxTransformer& model) const {
  const FluxConfig& c = model.config();
  WICK_CHECK_KIND(Config, c.latent_channels() == vae_sizes().z_channels, "the Flux model takes ", c.latent_channels(),
                  "-channel latents (img_in ", c.in_channels, " = channels x 2 x 2) but the VAE ", flux_.files.vae,
                  " has ", vae_sizes().z_channels);
  if (encoders_) {
    WICK_CHECK_KIND(Config, c.context_dim == encoders_->t5.d_model(), "the Flux model takes ", c.context_dim,
                    "-wide text (txt_in) but the T5 encoder ", flux_.files.t5, " is ", encoders_->t5.d_model(),
                    " wide");
    WICK_CHECK_KIND(Config, c.vec_dim == encoders_->clip_l.width(), "the Flux model takes a ", c.vec_dim,
                    "-wide pooled vector (vector_in) but CLIP-L ", flux_.files.clip_l, " is ",
                    encoders_->clip_l.width(), " wide");
  }
  check_stored_widths(c.context_dim, "text (txt_in)", c.vec_dim, "pooled vector (vector_in)");
}

LatentImageSampler::SizeRule FluxImageSampler::size_rule(DiffusionModel& model) const {
  WICK_CHECK_KIND(Config, dynamic_cast<FluxTransformer*>(&model) != nullptr,
                  "the Flux sampler needs a Flux model, got ", model.summary());
  return {.latent_multiple = 2, .why = "the 2 x 2 patches"};
}

Tensor FluxImageSampler::sample(DiffusionModel& model, const std::vector<std::string>& prompts, const Tensor& noise,
                                const SampleSettings& settings) {
  return generate_from_noise(dynamic_cast<FluxTransformer&>(model), prompts, noise, settings);
}

Tensor FluxImageSampler::generate_from_noise(FluxTransformer& model, const std::vector<std::string>& prompts,
                                             const Tensor& noise, const SampleSettings& settings) {
  const auto n = static_cast<int64_t>(prompts.size());
  const int64_t channels = vae_sizes().z_channels;
  WICK_CHECK(noise.dim() == 4 && noise.size(0) == n && noise.size(1) == channels && noise.size(2) % 2 == 0 &&
                 noise.size(3) % 2 == 0,
             "flux sampler: noise must be [", n, ", ", channels, ", h, w] with h and w even, got ", noise.describe());
  WICK_CHECK_KIND(Config, settings.steps >= 1, "flux sampler: steps must be >= 1, got ", settings.steps);
  WICK_CHECK_KIND(Config, settings.guidance >= 0, "flux sampler: guidance must be >= 0, got ", settings.guidance);
  check_fits(model);
  const Device device = device_of(model);
  EvalModeGuard eval_mode(model);
  autograd::NoGradGuard no_grad;

  // Each distinct prompt once: its stored row when the dataset holds it at this T5 length, else the encoders' output.
  const int64_t t5_length = t5_length_for(model);
  std::string length_note;
  if (stored() && stored()->embeds.size(1) != t5_length)
    length_note = ", made with " + std::to_string(stored()->embeds.size(1)) + " T5 tokens, not " +
                  std::to_string(t5_length);
  auto [context, pooled, mask] = embed(
      texts_of(prompts), [t5_length](int64_t stored_length) { return stored_length == t5_length; },
      [&](const std::vector<std::string>& texts) {
        return encode_flux_prompts(*encoders_, texts, {.t5_length = t5_length});
      },
      std::nullopt, length_note);
  context = context.to(device);
  pooled = pooled.to(device);

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

void FluxImageSampler::unload_encoders() { encoders_->unload(); }

std::string FluxImageSampler::describe_text() const {
  std::string out;
  if (encoders_) out += ", CLIP-L " + encoders_->clip_l.source_path() + ", T5 " + encoders_->t5.source_path();
  out += ", T5 length " +
         (flux_.t5_length > 0 ? std::to_string(flux_.t5_length) : std::string("512 (dev) / 256 (schnell)"));
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
  std::optional<SamplePrompts> stored =
      stored_prompts_for(dataset, recorded > 0 && data.text_pooled_encoder == "clip-l");
  if (stored && stored->embeds.size(1) != t5_length) stored.reset();
  const std::vector<std::string> not_stored =
      text::texts_not_stored(grid_texts(request, std::nullopt), request.config.trigger_word, stored);
  const std::vector<std::pair<SamplerFile, std::string>> text = text_paths(files);
  check_sampler_parts({.model = "Flux",
                       .vae = kVae,
                       .vae_path = files.vae,
                       .text = text,
                       .where_all = "a diffusers pipeline folder as model.name_or_path, such as FLUX.1-dev/, gives all "
                                    "five",
                       .stored = &stored,
                       .not_stored = not_stored,
                       .dataset_path = dataset.path(),
                       .stored_rule = "sample.prompts with the trigger word put in must equal them byte for byte to be "
                                      "used without text encoders"});
  const vae::VaeConfig sizes = sampler_vae_config(files.vae);
  const SamplerDataset from_data = sampler_dataset(dataset, "flux", kVaeNormalization, sizes, files.vae);

  auto sampler = make_naming_text_parts<FluxImageSampler>("Flux", text, [&] {
    return std::make_unique<FluxImageSampler>(FluxSamplerSetup{
        .files = files,
        .t5_length = t5_length,
        .normalization = from_data.normalization,
        .default_height = from_data.default_height,
        .default_width = from_data.default_width,
        .trigger_word = request.config.trigger_word,
        .device = request.device,
        .keep_loaded = model.options.get_bool("keep_encoders_loaded"),
        .stored_prompts = std::move(stored)});
  });
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
