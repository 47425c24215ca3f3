#include "models/flux/flux_sampler.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include "engine/autograd/grad_mode.h"
#include "models/diffusion/generate.h"
#include "models/diffusion/samplers.h"
#include "models/vae/vae_weights.h"
#include "runtime/error.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/index.h"
#include "runtime/ops/join.h"

namespace fs = std::filesystem;

namespace wick::flux {
namespace {

// Images per transformer call.
constexpr int64_t kSampleBatch = 4;

Device device_of(const Module& model) {
  auto parameters = model.named_parameters();
  return parameters.empty() ? Device::cpu() : parameters.front().second.device();
}

FluxTextEncoders open_encoders(const FluxSamplerSetup& setup) {
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

std::optional<std::string> pipeline_folder(const std::string& name_or_path) {
  if (name_or_path.empty()) return std::nullopt;
  std::error_code ec;
  fs::path path = fs::path(name_or_path).lexically_normal();
  if (!path.has_filename()) path = path.parent_path();
  if (fs::is_directory(path, ec) &&
      (fs::is_regular_file(path / "model_index.json", ec) || fs::is_directory(path / "transformer", ec)))
    return path.string();
  fs::path parent = path.parent_path();
  if (parent.empty()) parent = ".";
  if (fs::is_regular_file(parent / "model_index.json", ec)) return parent.string();
  return std::nullopt;
}

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
  WICK_CHECK_KIND(Config, c.context_dim == encoders_.t5.d_model(), "the Flux model takes ", c.context_dim,
                  "-wide text (txt_in) but the T5 encoder ", setup_.files.t5, " is ", encoders_.t5.d_model(), " wide");
  WICK_CHECK_KIND(Config, c.vec_dim == encoders_.clip_l.width(), "the Flux model takes a ", c.vec_dim,
                  "-wide pooled vector (vector_in) but CLIP-L ", setup_.files.clip_l, " is ", encoders_.clip_l.width(),
                  " wide");
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

  // Each distinct prompt is encoded once.
  std::vector<std::string> distinct;
  std::map<std::string, int64_t> row_of;
  std::vector<int64_t> rows;
  for (const std::string& prompt : prompts) {
    const std::string text = with_trigger_word(prompt, setup_.trigger_word);
    auto [at, added] = row_of.emplace(text, static_cast<int64_t>(distinct.size()));
    if (added) distinct.push_back(text);
    rows.push_back(at->second);
  }
  text::PromptEmbeddings text = encode_flux_prompts(encoders_, distinct, {.t5_length = t5_length_for(model)});
  const Tensor index = Tensor::from_vector<int64_t>(rows, {n}, text.context.device());
  const Tensor context = index_select(text.context, 0, index).to(device);
  const Tensor pooled = index_select(text.pooled, 0, index).to(device);
  text = {};

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
  std::vector<Tensor> images;
  for (int64_t i = 0; i < latents.size(0); ++i) {  // one at a time: the decoder's activations are the peak
    Tensor z = vae::denormalize_latents(latents.narrow(0, i, 1), setup_.normalization);
    Tensor pixels = model->decode(z.to(setup_.device)).to(DType::F32).to(Device::cpu());
    images.push_back(minimum(maximum(mul(add(pixels, 1.0), 0.5), 0.0), 1.0));  // [-1, 1] -> [0, 1]
  }
  return images.size() == 1 ? images.front().contiguous() : concat(images, 0);
}

void FluxImageSampler::unload() {
  vae_.reset();
  encoders_.clip_l.unload();
  encoders_.t5.unload();
}

std::string FluxImageSampler::describe() const {
  return "Flux: VAE " + setup_.files.vae + ", CLIP-L " + encoders_.clip_l.source_path() + ", T5 " +
         encoders_.t5.source_path() + ", T5 length " +
         (setup_.t5_length > 0 ? std::to_string(setup_.t5_length) : std::string("512 (dev) / 256 (schnell)"));
}

// ---- for a run ----

std::unique_ptr<ImageSampler> make_flux_sampler(const SamplerRequest& request) {
  const ModelConfig& model = request.config.model;
  const LatentDataset& dataset = request.dataset;
  const SamplerKind asked = request.config.sample.sampler;
  WICK_CHECK_KIND(Config, asked == SamplerKind::Auto || asked == SamplerKind::Euler, "sample.sampler: ",
                  sampler_name(asked), " does not fit Flux, a rectified-flow model (use euler or auto)");
  const FluxSamplingFiles files = sampling_files(model);
  std::vector<std::string> missing;
  if (files.vae.empty())
    missing.push_back("the VAE (model.vae_path: ae.safetensors, a diffusers vae/ folder or a pipeline folder)");
  if (files.clip_l.empty())
    missing.push_back("CLIP-L (model.clip_l_path: clip_l.safetensors or a text_encoder/ folder)");
  if (files.t5.empty())
    missing.push_back("T5-XXL (model.t5_path: t5xxl_fp16.safetensors or a text_encoder_2/ folder)");
  if (files.clip_tokenizer.empty())
    missing.push_back("the CLIP tokenizer (model.clip_tokenizer_path: a tokenizer/ folder with vocab.json and "
                      "merges.txt, or open_clip's bpe_simple_vocab_16e6.txt.gz)");
  if (files.t5_tokenizer.empty())
    missing.push_back("the T5 tokenizer (model.t5_tokenizer_path: spiece.model or a tokenizer_2/ folder)");
  WICK_CHECK_KIND(Config, missing.empty(), "Flux sample images need ", join(missing, "; "), ", and ",
                  missing.size() == 1 ? "it is" : "they are",
                  " not given (a diffusers pipeline folder as model.name_or_path, such as FLUX.1-dev/, gives all "
                  "five)");
  const std::vector<std::pair<const char*, const std::string*>> keyed = {
      {"vae_path", &files.vae},
      {"clip_l_path", &files.clip_l},
      {"t5_path", &files.t5},
      {"clip_tokenizer_path", &files.clip_tokenizer},
      {"t5_tokenizer_path", &files.t5_tokenizer}};
  std::error_code ec;
  for (const auto& [key, path] : keyed)
    WICK_CHECK_KIND(Config, fs::exists(*path, ec), "model.", key, ": ", *path, ": no such file or folder");

  vae::VaeConfig sizes;
  try {
    sizes = vae::read_vae_header(files.vae).config;
  } catch (const WickError& error) {
    throw WickError(error.kind(), "model.vae_path " + files.vae + ": " + message_of(error));
  }

  // The T5 length: the key, else what the dataset's embeddings were made with, else the variant's.
  const LatentDatasetAttributes& data = dataset.attributes();
  const int64_t configured = model.options.get_int("t5_length");
  const int64_t recorded = data.text_embeds_encoder.rfind("t5", 0) == 0 ? data.text_max_length : 0;
  WICK_CHECK_KIND(Config, configured == 0 || recorded == 0 || configured == recorded, "model.t5_length is ", configured,
                  " but the text embeddings of ", dataset.path(), " were made with ", recorded,
                  " T5 tokens (text_max_length); Flux attends to T5's padding, so train and sample with the same "
                  "length (set model.t5_length: ", recorded, " or leave it out)");
  FluxSamplerSetup setup{.files = files,
                         .t5_length = configured > 0 ? configured : recorded,
                         .normalization = vae::latent_normalization(vae::VaeFamily::Flux),
                         .trigger_word = request.config.trigger_word,
                         .device = request.device,
                         .keep_loaded = model.options.get_bool("keep_encoders_loaded")};
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
  const FluxTextEncoders& encoders = sampler->encoders();
  WICK_CHECK_KIND(Config, data.latent_channels == 0 || data.latent_channels == sizes.z_channels, dataset.path(),
                  " holds ", data.latent_channels, "-channel latents but the VAE (model.vae_path ", files.vae,
                  ") has ", sizes.z_channels);
  WICK_CHECK_KIND(Config, dataset.text_dim() == 0 || dataset.text_dim() == encoders.t5.d_model(), dataset.path(),
                  "'s text embeddings are ", dataset.text_dim(), " wide but the T5 encoder (model.t5_path ", files.t5,
                  ") is ", encoders.t5.d_model(), " wide");
  WICK_CHECK_KIND(Config, dataset.pooled_dim() == 0 || dataset.pooled_dim() == encoders.clip_l.width(),
                  dataset.path(), "'s pooled embeddings are ", dataset.pooled_dim(),
                  " wide but CLIP-L (model.clip_l_path ", files.clip_l, ") is ", encoders.clip_l.width(), " wide");
  return sampler;
}

}  // namespace wick::flux
