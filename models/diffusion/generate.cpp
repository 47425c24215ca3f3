#include "models/diffusion/generate.h"

#include <algorithm>

#include "engine/autograd/grad_mode.h"
#include "engine/checkpoint/latest_pointer.h"
#include "engine/data/fashion_pack.h"
#include "engine/train/train_setup.h"
#include "models/diffusion/samplers.h"
#include "models/lora_files.h"
#include "models/model_factory.h"
#include "models/registry.h"
#include "models/vae/wan_vae_config.h"
#include "runtime/error.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/join.h"
#include "runtime/ops/random.h"
#include "runtime/philox.h"
#include "runtime/safetensors.h"

namespace wick {
namespace {

Device model_device(const DiffusionModel& model) {
  auto parameters = model.named_parameters();
  return parameters.empty() ? Device::cpu() : parameters.front().second.device();
}

diffusion::Conditioning encode_on(const HashedTextEncoder& encoder, const std::vector<std::string>& captions,
                                  Device device) {
  TextEncoding text = encoder.encode(captions);
  return {text.embeds.to(device), text.mask.to(device), text.pooled.to(device)};
}

SamplerKind resolved_sampler(const TrainConfig& config) {
  SamplerKind natural = config.train.noise_scheduler == NoiseScheduler::FlowMatch ? SamplerKind::Euler : SamplerKind::Ddim;
  SamplerKind asked = config.sample.sampler;
  WICK_CHECK_KIND(Config, asked == SamplerKind::Auto || asked == natural, "sample.sampler: ", sampler_name(asked),
                  " does not fit train.noise_scheduler ", noise_scheduler_name(config.train.noise_scheduler),
                  " (use ", sampler_name(natural), " or auto)");
  return natural;
}

// generate_latents + latents_to_images for the dataset's hashed captions and pixel-packed latents.
class HashedTextSampler : public ImageSampler {
 public:
  HashedTextSampler(const TrainConfig& config, const LatentDataset& dataset)
      : config_(config),
        encoder_(dataset_text_encoder(dataset)),
        latent_shape_(sample_latent_shape(dataset)),
        attributes_(dataset.attributes()) {}

  Tensor generate(DiffusionModel& model, const std::vector<std::string>& prompts,
                  const SampleSettings& settings) override {
    WICK_CHECK_KIND(Config, settings.width == 0 && settings.height == 0, "model.arch ", config_.model.arch,
                    " samples at the dataset's latent size (", latent_shape_[1], " x ", latent_shape_[2],
                    "); a width or height cannot be chosen");
    Tensor latents = generate_latents(model, config_, encoder_, prompts, latent_shape_, settings.steps,
                                      settings.guidance, settings.seed);
    return latents_to_images(latents, attributes_);
  }

  std::string describe() const override {
    return std::string(HashedTextEncoder::name) + " captions, " + attributes_.model_family + " latents " +
           std::to_string(latent_shape_[0]) + " x " + std::to_string(latent_shape_[1]) + " x " +
           std::to_string(latent_shape_[2]);
  }

 private:
  TrainConfig config_;
  HashedTextEncoder encoder_;
  Shape latent_shape_;
  LatentDatasetAttributes attributes_;
};

}  // namespace

std::string with_trigger_word(std::string caption, const std::string& trigger_word) {
  const std::string marker = "[trigger]";
  for (size_t at = caption.find(marker); at != std::string::npos; at = caption.find(marker, at + trigger_word.size()))
    caption.replace(at, marker.size(), trigger_word);
  return caption;
}

Tensor sample_noise(const Shape& image_shape, int64_t first, int64_t n, uint64_t seed, Device device) {
  std::vector<Tensor> parts;
  parts.reserve(static_cast<size_t>(n));
  for (int64_t i = first; i < first + n; ++i)
    parts.push_back(randn(image_shape, derive_stream(seed, static_cast<uint64_t>(i), 0, RngPurpose::Noise),
                          DType::F32, device));
  return stack(parts, 0);
}

namespace {
// The DDIM sampler takes the model's output as ε (SDXL's sampler reads v as well: models/sdxl/sdxl_sampler.h).
void check_prediction(const TrainConfig& config) {
  WICK_CHECK_KIND(Config, config.train.prediction_type != PredictionType::V, "train.prediction_type v_prediction "
                  "trains a v target, but the DDIM sample images of model.arch ", config.model.arch, " take the "
                  "model's output as ε: set sample.every to 0");
}
}  // namespace

std::unique_ptr<ImageSampler> make_hashed_text_sampler(const TrainConfig& config, const LatentDataset& dataset) {
  check_prediction(config);
  try {
    dataset_text_encoder(dataset);
    latents_to_images(zeros({1, dataset.attributes().latent_channels, 2, 2}), dataset.attributes());
  } catch (const WickError& error) {
    WICK_FAIL(Config, "sample images cannot be made for ", dataset.path(), ": ", error.what());
  }
  return std::make_unique<HashedTextSampler>(config, dataset);
}

HashedTextEncoder dataset_text_encoder(const LatentDataset& dataset) {
  const std::string& name = dataset.attributes().text_encoder;
  WICK_CHECK_KIND(Data, name == HashedTextEncoder::name, dataset.path(), ": text_encoder is '", name,
                  "'; only captions of '", HashedTextEncoder::name, "' can be encoded for sampling");
  WICK_CHECK_KIND(Data, dataset.pooled_dim() == dataset.text_dim(), dataset.path(), ": pooled width ",
                  dataset.pooled_dim(), " differs from the text width ", dataset.text_dim(), " of ",
                  HashedTextEncoder::name);
  return HashedTextEncoder(dataset.text_length(), dataset.text_dim());
}

diffusion::Denoiser model_denoiser(DiffusionModel& model, NoiseScheduler scheduler) {
  const double t_scale = scheduler == NoiseScheduler::Ddpm ? 1.0 / 1000.0 : 1.0;
  const DType compute = model.dtype();
  return [&model, t_scale, compute](const Tensor& x, const Tensor& t, const diffusion::Conditioning& cond) {
    Tensor model_t = t_scale == 1.0 ? t : mul(t, t_scale);
    Tensor out = model.predict(x.to(compute), model_t, cond);
    return out.to(DType::F32);
  };
}

Tensor generate_latents(DiffusionModel& model, const TrainConfig& config, const HashedTextEncoder& encoder,
                        const std::vector<std::string>& captions, const Shape& latent_shape, int64_t steps,
                        double guidance, uint64_t seed) {
  WICK_CHECK_KIND(Config, steps >= 1, "generate: steps must be >= 1, got ", steps);
  WICK_CHECK_KIND(Config, guidance >= 0.0, "generate: guidance must be >= 0, got ", guidance);
  WICK_CHECK(latent_shape.size() == 3, "generate: latent_shape must be {C, H, W}");
  const SamplerKind sampler = resolved_sampler(config);
  if (sampler == SamplerKind::Ddim) check_prediction(config);
  const Device device = model_device(model);
  const Shape& image_shape = latent_shape;
  const int64_t n = static_cast<int64_t>(captions.size());
  if (n == 0) return Tensor::empty({0, latent_shape[0], latent_shape[1], latent_shape[2]}, DType::F32);

  EvalModeGuard eval_mode(model);
  autograd::NoGradGuard no_grad;
  diffusion::Denoiser denoiser = model_denoiser(model, config.train.noise_scheduler);
  const diffusion::DdpmSchedule schedule = diffusion::DdpmSchedule::scaled_linear();
  const std::string negative = with_trigger_word(config.sample.negative_prompt, config.trigger_word);

  std::vector<Tensor> outputs;
  for (int64_t first = 0; first < n; first += generate_batch_size) {
    const int64_t count = std::min(generate_batch_size, n - first);
    std::vector<std::string> batch_captions;
    for (int64_t i = first; i < first + count; ++i)
      batch_captions.push_back(with_trigger_word(captions[static_cast<size_t>(i)], config.trigger_word));
    diffusion::Conditioning cond = encode_on(encoder, batch_captions, device);
    diffusion::GuidanceConfig guide;
    guide.scale = guidance;
    if (guidance != 1.0)
      guide.uncond = encode_on(encoder, std::vector<std::string>(static_cast<size_t>(count), negative), device);
    Tensor noise = sample_noise(image_shape, first, count, seed, device);
    Tensor latents;
    if (sampler == SamplerKind::Euler) {
      diffusion::FlowSamplerConfig flow;
      flow.n_steps = steps;
      if (config.train.timestep_sampling == TimestepSampling::FluxShift) {
        flow.shift = diffusion::SigmaShift::Resolution;
      } else if (config.train.timestep_sampling == TimestepSampling::QwenShift) {
        flow.shift = diffusion::SigmaShift::Resolution;
        flow.max_shift = diffusion::kQwenMaxShift;
        flow.max_tokens = diffusion::kQwenMaxTokens;
      } else if (config.train.timestep_shift != 1.0) {
        flow.shift = diffusion::SigmaShift::Constant;
        flow.shift_value = config.train.timestep_shift;
      }
      flow.guidance = guide;
      latents = diffusion::sample_flow_euler(denoiser, noise, cond, flow);
    } else {
      diffusion::DdimConfig ddim;
      ddim.n_steps = steps;
      ddim.guidance = guide;
      latents = diffusion::sample_ddim(denoiser, noise, cond, schedule, ddim);
    }
    outputs.push_back(latents.to(DType::F32).to(Device::cpu()));
  }
  return outputs.size() == 1 ? outputs.front().contiguous() : concat(outputs, 0);
}

Tensor latents_to_images(const Tensor& latents, const LatentDatasetAttributes& data) {
  WICK_CHECK_KIND(Config, data.model_family == "fashion-dit", "latents_to_images: model family '", data.model_family,
                  "' needs a VAE decoder, which wick does not have (only pixel-packed 'fashion-dit' latents decode)");
  WICK_CHECK(latents.dim() == 4 && latents.size(1) == data.latent_channels && latents.size(1) % 4 == 0,
             "latents_to_images: expected latents [N, ", data.latent_channels, ", h, w], got ", latents.describe());
  WICK_CHECK_KIND(Data, data.vae_scaling_factor != 0.0, "latents_to_images: vae_scaling_factor is 0");
  Tensor raw = latents.to(Device::cpu()).to(DType::F32);
  // The model sees ((latent − shift)·scaling − mean_c) / std_c (Objective::scale_latents); undo it before unpacking.
  if (!data.vae_latents_mean.empty() || !data.vae_latents_std.empty())
    raw = vae::denormalize_wan_latents(raw, {.mean = data.vae_latents_mean, .std = data.vae_latents_std});
  raw = add(div(raw, data.vae_scaling_factor), data.vae_shift_factor);
  Tensor pixels = unpack_latents_2x2(raw);               // [-1, 1]
  Tensor unit = mul(add(pixels, 1.0), 0.5);              // [0, 1]
  return minimum(maximum(unit, 0.0), 1.0).contiguous();
}

// ---- trained runs ----

namespace {

namespace fs = std::filesystem;

// The config of the run whose checkpoint `weights` names (<run>/checkpoints/<step>), when it is there.
std::optional<TrainConfig> config_of_checkpoint(const std::string& weights) {
  fs::path path(weights);
  if (path.has_filename() && path.parent_path().filename() == "checkpoints") {
    fs::path config = path.parent_path().parent_path() / "config.yaml";
    if (fs::exists(config)) return parse_config_file(config.string(), config_schema());
  }
  return std::nullopt;
}

TrainConfig lora_training_config(const std::string& path) {
  WICK_CHECK_KIND(Config, fs::is_regular_file(path), "--lora ", path, ": no such file");
  SafetensorsFile file = SafetensorsFile::open(path);
  auto found = file.metadata().find("wick_config");
  WICK_CHECK_KIND(Data, found != file.metadata().end(), path,
                  ": no wick_config metadata (not written by wick train), so its network settings are unknown");
  return parse_config_string(found->second, path + " (wick_config metadata)", config_schema());
}

}  // namespace

TrainedRun locate_run(const std::string& source, const std::string& lora_override,
                      const std::vector<std::string>& overrides) {
  WICK_CHECK_KIND(Config, fs::exists(source), source, ": no such run directory or config file");
  TrainedRun run;
  if (fs::is_directory(source)) {
    fs::path config = fs::path(source) / "config.yaml";
    WICK_CHECK_KIND(Config, fs::exists(config), source, ": not a run directory (no config.yaml; train it with wick train)");
    run.config = parse_config_file(config.string(), config_schema(), overrides);
    run.run_dir = source;
  } else {
    run.config = parse_config_file(source, config_schema(), overrides);
    run.run_dir = fs::path(run.config.output_dir) / run.config.name;
  }
  const TrainConfig& c = run.config;
  WICK_CHECK_KIND(Config, !c.datasets.empty(), source, ": the config names no dataset");
  run.dataset = LatentDataset::open(c.datasets[0].path);
  run.device = select_device(c.device);
  if (c.network.type == NetworkType::Full) {
    const LatestPointer latest = read_latest(run.run_dir / "checkpoints");
    if (latest.form != LatestForm::Missing) {
      run.base_weights = resolve_checkpoint_path(latest.path).string();  // the step directory it names
      run.base_config = c;
    } else {
      WICK_CHECK_KIND(Config, !c.model.name_or_path.empty(), run.run_dir.string(),
                      ": no trained weights (checkpoints/latest is missing; run wick train first)");
      run.base_weights = c.model.name_or_path;
      run.base_config = config_of_checkpoint(run.base_weights);
    }
  } else {
    WICK_CHECK_KIND(Config, !c.model.name_or_path.empty(), source, ": a ", network_type_name(c.network.type),
                    " run needs model.name_or_path (its base weights)");
    run.base_weights = c.model.name_or_path;
    run.base_config = config_of_checkpoint(run.base_weights);
    run.lora = (run.run_dir / "lora" / (c.name + ".safetensors")).string();
    run.lora_config = c;
  }
  WICK_CHECK_KIND(Config, fs::exists(run.base_weights), run.base_weights, ": base weights not found");
  if (!lora_override.empty()) {
    run.lora_config = lora_training_config(lora_override);
    run.lora = lora_override;
  }
  WICK_CHECK_KIND(Config, run.lora.empty() || fs::exists(run.lora), run.lora,
                  ": LoRA file not found (the run saves it at its checkpoints)");
  WICK_CHECK_KIND(Config, !run.lora_config || run.lora_config->network.type != NetworkType::Full, run.lora,
                  ": its config says network.type full; that is not an adapter file");
  return run;
}

std::shared_ptr<DiffusionModel> build_trained_model(const TrainedRun& run, bool with_lora) {
  TrainConfig config = run.config;
  config.model.name_or_path = run.base_weights;
  config.network = NetworkConfig{};  // full: every weight from base_weights
  const bool lora = with_lora && !run.lora.empty();
  if (lora) config.network = run.lora_config->network;
  std::shared_ptr<DiffusionModel> model = build_model(config, dataset_geometry(*run.dataset), run.device);
  if (lora) load_lora(*model, run.lora);
  model->eval();
  return model;
}

std::unique_ptr<ImageSampler> make_run_sampler(const TrainedRun& run) {
  return find_architecture(run.config.model.arch).make_sampler({.config = run.config, .dataset = *run.dataset,
                                                                .device = run.device});
}

Shape sample_latent_shape(const LatentDataset& dataset) {
  WICK_CHECK_KIND(Data, !dataset.buckets().empty(), dataset.path(), ": the dataset has no buckets");
  const BucketInfo& bucket = dataset.buckets().front();
  return {dataset.attributes().latent_channels, bucket.height, bucket.width};
}

}  // namespace wick
