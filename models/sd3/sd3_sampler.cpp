#include "models/sd3/sd3_sampler.h"

#include <algorithm>
#include <map>

#include "engine/autograd/grad_mode.h"
#include "engine/data/captions.h"
#include "models/diffusion/generate.h"
#include "models/diffusion/samplers.h"
#include "models/text/stored_prompts.h"
#include "models/vae/vae_weights.h"
#include "models/weights/pipeline_folder.h"
#include "runtime/error.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/index.h"
#include "runtime/ops/join.h"


namespace wick::sd3 {

using text::prompt_text;
namespace {

// The files an SD3 run samples with, by config key.
const SamplerFile kVae{.label = "the VAE",
                       .key = "vae_path",
                       .hint = "a diffusers vae/ folder, a VAE file or an SD3.5 single file",
                       .pipeline_parts = {"vae"},
                       .single_file_prefix = "first_stage_model."};
const std::vector<SamplerFile>& text_files() {
  static const std::vector<SamplerFile> files = {
      {.label = "CLIP-L",
       .key = "clip_l_path",
       .hint = "clip_l.safetensors or a text_encoder/ folder",
       .pipeline_parts = {"text_encoder"},
       .single_file_prefix = "text_encoders.clip_l.transformer."},
      {.label = "CLIP-G",
       .key = "clip_g_path",
       .hint = "clip_g.safetensors or a text_encoder_2/ folder",
       .pipeline_parts = {"text_encoder_2"},
       .single_file_prefix = "text_encoders.clip_g.transformer."},
      {.label = "T5-XXL",
       .key = "t5_path",
       .hint = "t5xxl_fp16.safetensors or a text_encoder_3/ folder",
       .pipeline_parts = {"text_encoder_3"},
       .single_file_prefix = "text_encoders.t5xxl.transformer."},
      {.label = "the CLIP tokenizer",
       .key = "clip_tokenizer_path",
       .hint = "a tokenizer/ folder with vocab.json and merges.txt, or open_clip's bpe_simple_vocab_16e6.txt.gz",
       .pipeline_parts = {"tokenizer"}},
      {.label = "bigG's tokenizer",
       .key = "clip_g_tokenizer_path",
       .hint = "a tokenizer_2/ folder",
       .pipeline_parts = {"tokenizer_2"},
       .required = false},
      {.label = "the T5 tokenizer",
       .key = "t5_tokenizer_path",
       .hint = "spiece.model or a tokenizer_3/ folder",
       .pipeline_parts = {"tokenizer_3"}},
  };
  return files;
}

std::vector<std::pair<SamplerFile, std::string>> text_paths(const Sd3SamplingFiles& f) {
  const std::vector<SamplerFile>& files = text_files();
  return {{files[0], f.clip_l},         {files[1], f.clip_g},           {files[2], f.t5},
          {files[3], f.clip_tokenizer}, {files[4], f.clip_g_tokenizer}, {files[5], f.t5_tokenizer}};
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

double sigma_shift(double t, double shift) { return shift * t / (1.0 + (shift - 1.0) * t); }


}  // namespace

Sd3SamplingFiles sampling_files(const ModelConfig& model) {
  std::vector<SamplerFile> files = text_files();
  files.push_back(kVae);
  std::string pipeline;
  std::map<std::string, std::string> paths = resolve_sampler_files(model, files, &pipeline);
  return {.vae = paths["vae_path"],
          .clip_l = paths["clip_l_path"],
          .clip_g = paths["clip_g_path"],
          .t5 = paths["t5_path"],
          .clip_tokenizer = paths["clip_tokenizer_path"],
          .clip_g_tokenizer = paths["clip_g_tokenizer_path"],
          .t5_tokenizer = paths["t5_tokenizer_path"],
          .pipeline = pipeline};
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
    : LatentImageSampler(latent_setup_of(setup, "SD3", {kVaeNormalization, "sd3"}, text_paths(setup.files))),
      sd3_(std::move(setup)), encoders_(open_encoders(sd3_)) {
  WICK_CHECK_KIND(Config, sd3_.t5_length >= 1, "sd3 sampler: t5_length must be >= 1, got ", sd3_.t5_length);
  WICK_CHECK_KIND(Config, sd3_.shift > 0, "sd3 sampler: the shift must be > 0, got ", sd3_.shift);
}

bool Sd3ImageSampler::usable(int64_t stored_length) const {
  // Rows of one batch must have one length: with encoders, stored rows must be as long as encoded ones.
  return !encoders_ || stored_length == encoders_->clip_l_tokenizer.context_length() + sd3_.t5_length;
}

bool Sd3ImageSampler::is_stored(const std::string& prompt) const {
  return holds(prompt) && usable(stored()->embeds.size(1));
}

void Sd3ImageSampler::check_fits(const MMDiT& model) const {
  const Sd3Config& c = model.config();
  WICK_CHECK_KIND(Config, c.in_channels == vae_sizes().z_channels, "the SD3 model takes ", c.in_channels,
                  "-channel latents (x_embedder) but the VAE ", sd3_.files.vae, " has ", vae_sizes().z_channels);
  if (encoders_) {
    WICK_CHECK_KIND(Config, c.context_dim == encoders_->t5.d_model(), "the SD3 model takes ", c.context_dim,
                    "-wide text (context_embedder) but the T5 encoder ", sd3_.files.t5, " is ",
                    encoders_->t5.d_model(), " wide");
    const bool projected = sd3_.clip_l_pooled == ClipLPooled::Projected;
    WICK_CHECK_KIND(Config, !projected || encoders_->clip_l.projection_dim() > 0, "CLIP-L ", sd3_.files.clip_l,
                    " has no text_projection.weight, and the pooled vectors are CLIP-L's projected ones (diffusers', "
                    "kohya's: what the dataset's embeddings were made with); give a CLIP-L with its projection "
                    "(diffusers' text_encoder/), or encode the dataset with --clip-l-pooled unprojected");
    const int64_t l_pooled = projected ? encoders_->clip_l.projection_dim() : encoders_->clip_l.width();
    const int64_t pooled = l_pooled + encoders_->clip_g.projection_dim();
    WICK_CHECK_KIND(Config, c.pooled_dim == pooled, "the SD3 model takes a ", c.pooled_dim,
                    "-wide pooled vector (y_embedder) but CLIP-L ", sd3_.files.clip_l, " and CLIP-G ",
                    sd3_.files.clip_g, " pool to ", l_pooled, " + ", encoders_->clip_g.projection_dim(), " = ",
                    pooled);
  }
  check_stored_widths(c.context_dim, "text (context_embedder)", c.pooled_dim, "pooled vector (y_embedder)");
}

LatentImageSampler::SizeRule Sd3ImageSampler::size_rule(DiffusionModel& model) const {
  auto* mmdit = dynamic_cast<MMDiT*>(&model);
  WICK_CHECK_KIND(Config, mmdit != nullptr, "the SD3 sampler needs an SD3 model, got ", model.summary());
  const int64_t p = mmdit->config().patch_size;
  return {.latent_multiple = p, .why = "the " + std::to_string(p) + " x " + std::to_string(p) + " patches"};
}

Tensor Sd3ImageSampler::sample(DiffusionModel& model, const std::vector<std::string>& prompts, const Tensor& noise,
                               const SampleSettings& settings) {
  return generate_from_noise(dynamic_cast<MMDiT&>(model), prompts, noise, settings);
}

Tensor Sd3ImageSampler::generate_from_noise(MMDiT& model, const std::vector<std::string>& prompts, const Tensor& noise,
                                            const SampleSettings& settings) {
  const auto n = static_cast<int64_t>(prompts.size());
  WICK_CHECK(noise.dim() == 4 && noise.size(0) == n && noise.size(1) == vae_sizes().z_channels &&
                 noise.size(2) % 2 == 0 && noise.size(3) % 2 == 0,
             "sd3 sampler: noise must be [", n, ", ", vae_sizes().z_channels, ", h, w] with h and w even, got ",
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
  std::vector<std::string> texts = texts_of(prompts);
  const std::string negative = prompt_text(sd3_.negative_prompt, sd3_.trigger_word);
  if (guided) texts.push_back(negative);
  auto [context, pooled, mask] = embed(
      texts, [this](int64_t stored_length) { return usable(stored_length); },
      [this](const std::vector<std::string>& to_encode) {
        return encode_sd3_prompts(*encoders_, to_encode,
                                  {.t5_length = sd3_.t5_length, .clip_l_pooled = sd3_.clip_l_pooled});
      },
      negative);
  context = context.to(device);
  pooled = pooled.to(device);

  diffusion::FlowSamplerConfig flow;
  flow.sigmas = sd3_sigmas(settings.steps, sd3_.shift);
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

void Sd3ImageSampler::unload_encoders() { encoders_->unload(); }

std::string Sd3ImageSampler::describe_text() const {
  return encoders_ ? ", CLIP-L " + encoders_->clip_l.source_path() + ", CLIP-G " + encoders_->clip_g.source_path() +
                         ", T5 " + encoders_->t5.source_path()
                   : std::string();
}

std::string Sd3ImageSampler::describe_choices() const {
  char shift[32];
  std::snprintf(shift, sizeof(shift), "%g", sd3_.shift);
  return ", T5 length " + std::to_string(sd3_.t5_length) + ", CLIP-L pooled " + clip_l_pooled_name(sd3_.clip_l_pooled) +
         ", shift " + shift + ", negative prompt \"" + prompt_text(sd3_.negative_prompt, sd3_.trigger_word) + "\"";
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
  std::optional<SamplePrompts> stored = stored_prompts_for(dataset, sd3_text && recorded > 0);
  const bool guided = request.config.sample.guidance != 1.0;
  const std::vector<std::string> not_stored = text::texts_not_stored(
      grid_texts(request, guided ? std::optional<std::string>(request.config.sample.negative_prompt) : std::nullopt),
      request.config.trigger_word, stored);
  const std::vector<std::pair<SamplerFile, std::string>> text = text_paths(files);
  check_sampler_parts({.model = "SD3",
                       .vae = kVae,
                       .vae_path = files.vae,
                       .text = text,
                       .where_all = "a diffusers pipeline folder as model.name_or_path, such as "
                                    "stable-diffusion-3.5-large/, gives all of them",
                       .stored = &stored,
                       .not_stored = not_stored,
                       .dataset_path = dataset.path(),
                       .stored_rule = "sample.prompts and sample.negative_prompt with the trigger word put in must "
                                      "equal them byte for byte to be used without text encoders; `wick dataset "
                                      "encode --model sd3 --config` stores both"});
  const vae::VaeConfig sizes = sampler_vae_config(files.vae);
  const SamplerDataset from_data = sampler_dataset(dataset, "sd3", kVaeNormalization, sizes, files.vae);

  const double configured_shift = model.options.get_float("sample_shift");
  double shift = 3.0;
  if (configured_shift > 0) {
    shift = configured_shift;
  } else if (std::optional<double> from_pipeline = pipeline_shift(files.pipeline, "SD3.5's")) {
    shift = *from_pipeline;
  }
  auto sampler = make_naming_text_parts<Sd3ImageSampler>("SD3", text, [&] {
    return std::make_unique<Sd3ImageSampler>(
        Sd3SamplerSetup{.files = files,
                        .t5_length = t5_length,
                        .clip_l_pooled = clip_l_pooled,
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
