// Sampling images from a trained model: captions -> hashed text embeddings -> Euler (flow matching)
// or DDIM (ε-prediction) with classifier-free guidance -> latents -> pixels.
//
//   auto dataset = LatentDataset::open("data/fashion.h5");
//   HashedTextEncoder encoder = dataset_text_encoder(*dataset);          // L, D from the file
//   Tensor latents = generate_latents(*model, config, encoder, {"Bag", "Ankle boot"}, {4, 14, 14}, 20, 3.0, 7);
//   Tensor images = latents_to_images(latents, dataset->attributes());   // f32 [2, 1, 28, 28] in [0, 1]
//
//   auto sampler = make_hashed_text_sampler(config, *dataset);           // the two calls above, as an ImageSampler
//
//   TrainedRun run = locate_run("output/quickstart_lora", "");       // config, dataset, weights, LoRA
//   std::shared_ptr<DiffusionModel> tuned = build_trained_model(run, true);   // base + the run's LoRA
//   auto images = make_run_sampler(run)->generate(*tuned, {"Bag"}, sample_settings(run.config.sample));
//
// Image i of a call draws its starting noise from derive_stream(seed, i, 0, RngPurpose::Noise), so it
// is the same image whatever the number of captions after it or the batch it lands in.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/config/train_config.h"
#include "engine/data/hashed_text_encoder.h"
#include "engine/data/latent_dataset.h"
#include "models/architecture.h"
#include "models/diffusion/denoiser.h"
#include "models/image_sampler.h"

namespace wick {

// Puts a module in evaluation mode and gives it back its training flag on scope exit.
class EvalModeGuard {
 public:
  explicit EvalModeGuard(Module& module) : module_(module), was_training_(module.is_training()) { module_.eval(); }
  ~EvalModeGuard() { module_.train(was_training_); }
  EvalModeGuard(const EvalModeGuard&) = delete;
  EvalModeGuard& operator=(const EvalModeGuard&) = delete;

 private:
  Module& module_;
  bool was_training_;
};

// `caption` with every "[trigger]" replaced by `trigger_word` (ai-toolkit's placeholder).
std::string with_trigger_word(std::string caption, const std::string& trigger_word);

// The starting noise of images first .. first + n - 1 of a call, f32 [n, ...image_shape] on `device`: image
// i is randn(image_shape, derive_stream(seed, i, 0, RngPurpose::Noise)), whatever the batch it lands in.
Tensor sample_noise(const Shape& image_shape, int64_t first, int64_t n, uint64_t seed, Device device);

// Images per model forward in generate_latents (the guided forward runs twice as many).
inline constexpr int64_t generate_batch_size = 64;

// The hashed word encoder with the settings of the dataset's embeddings (L = text_length(),
// D = text_dim()). A file whose `text_encoder` attribute names another encoder, or whose pooled
// width differs from D, throws WickError (Data): its captions cannot be re-encoded here.
HashedTextEncoder dataset_text_encoder(const LatentDataset& dataset);

// A model as a diffusion::Denoiser for `scheduler`, computing in the model's dtype and returning f32.
// FlowMatch: t is σ in [0, 1], passed as is. Ddpm: t is the timestep 0..999, passed as t / 1000
// (DiffusionModel::predict takes unit time; the model scales it for its embedder). Training and
// sampling use the same mapping. The model is held by reference: it must outlive the returned function.
diffusion::Denoiser model_denoiser(DiffusionModel& model, NoiseScheduler scheduler);

// Latents f32 [N, C, H, W] on the CPU for N captions, latent_shape = {C, H, W}.
// Captions go through `encoder` ("[trigger]" replaced by config.trigger_word); an empty caption is
// the unconditional input. Guidance g != 1 mixes in the prediction for config.sample.negative_prompt
// (empty by default = unconditional). The sampler follows config.train.noise_scheduler: flowmatch ->
// Euler with the SD3 shift config.train.timestep_shift (none when 1), ddpm -> DDIM (scaled-linear
// schedule); config.sample.sampler must agree (auto or the matching one). Runs in evaluation mode
// without recording a graph, in batches of generate_batch_size, and restores the training flag.
// steps >= 1, guidance >= 0.
Tensor generate_latents(DiffusionModel& model, const TrainConfig& config, const HashedTextEncoder& encoder,
                        const std::vector<std::string>& captions, const Shape& latent_shape, int64_t steps,
                        double guidance, uint64_t seed);

// Latents [N, 4c, h, w] (any float dtype, any device) of a pixel-packed dataset (model_family
// "fashion-dit") -> images f32 [N, c, 2h, 2w] on the CPU in [0, 1]: latent · vae_latents_std[c] + vae_latents_mean[c]
// (where the dataset has them), / vae_scaling_factor + vae_shift_factor, unpacked 2x2 (unpack_latents_2x2), mapped
// from [-1, 1] to [0, 1] and clamped.
// Other families need a VAE decoder, which wick does not have: WickError (Config).
Tensor latents_to_images(const Tensor& latents, const LatentDatasetAttributes& data);

// The sampler of the quickstart's family (the DiT on pixel-packed latents with hashed captions):
// generate_latents with the dataset's hashed word encoder at its first bucket's latent shape, then
// latents_to_images. Config error (WickError) naming the dataset when its captions were made by another
// encoder or its latents need a VAE decoder. settings.width / height must be 0 (the dataset's size).
std::unique_ptr<ImageSampler> make_hashed_text_sampler(const TrainConfig& config, const LatentDataset& dataset);

// ---- trained runs (what `wick sample` and `wick eval` load) ----
struct TrainedRun {
  std::filesystem::path run_dir;      // <output_dir>/<name>
  TrainConfig config;                 // the run's config (run_dir/config.yaml, or the config file given)
  std::shared_ptr<LatentDataset> dataset;  // config.datasets[0]
  Device device;
  std::string base_weights;           // weights of the model without adapters (a file or checkpoint dir)
  std::optional<TrainConfig> base_config;  // the config that trained the base, when found
  std::string lora;                   // LoRA/DoRA file to apply ("" = none)
  std::optional<TrainConfig> lora_config;  // the config that trained the LoRA (its network section is used)
};

// source: a run directory holding config.yaml, or a config file (run directory <output_dir>/<name>).
// Full runs: base_weights = the checkpoint run_dir/checkpoints/latest names (resolve_checkpoint_path),
// else model.name_or_path (Config error when neither exists: nothing trained). lora/dora runs:
// base_weights = model.name_or_path, lora = run_dir/lora/<name>.safetensors. lora_override (a file
// written by save_lora, whose wick_config metadata gives its network settings) replaces the run's
// LoRA or adds one to a full run. The base's config is looked up as <run>/config.yaml when
// base_weights is <run>/checkpoints/<step>. `overrides` ("key.path=value", as wick train's --set) are
// applied to the run's config (e.g. the text encoders a run trained without: model.t5_path=...). Every
// missing file is a Config error naming it.
TrainedRun locate_run(const std::string& source, const std::string& lora_override,
                      const std::vector<std::string>& overrides = {});

// The model of the run on run.device in evaluation mode: the base weights, plus the LoRA when
// with_lora and run.lora is set.
std::shared_ptr<DiffusionModel> build_trained_model(const TrainedRun& run, bool with_lora);

// The latent shape {C, H, W} samples of `dataset` have: its first bucket's.
Shape sample_latent_shape(const LatentDataset& dataset);

// The run's architecture's sampler (Architecture::make_sampler) on run.device.
std::unique_ptr<ImageSampler> make_run_sampler(const TrainedRun& run);

}  // namespace wick
