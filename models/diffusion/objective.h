// The training objective of a run: the noised input, the model's time input, the target and the
// per-sample loss weights from a batch of clean latents, plus caption dropout for classifier-free
// guidance. Every random number comes from Philox streams keyed by (seed, sample id, epoch), so a
// sample draws the same noise, σ/t and dropout decision on any rank, batch position or resume.
//
//   Objective objective(config.train);                                // flowmatch or ddpm
//   Tensor z = training_latents(batch, dataset_config.latent_sampling, seed, epoch);   // mean or a sample
//   Tensor x0 = objective.scale_latents(z, dataset_attributes);
//   diffusion::Conditioning cond = drop_captions(batch, p, seed, epoch);
//   ObjectiveBatch b = objective.make(x0, batch.ids, epoch);
//   Tensor pred = model->forward(b.x_t, b.model_time, cond.context, cond.context_mask, cond.pooled);
//   Tensor loss = objective.loss(pred, b);                             // 0-d f32, through autograd
//
// Models take their time input in [0, 1] (DiffusionModel::predict): σ for rectified flow, and the DDPM
// timestep divided by 1000 for ε-prediction (each model scales it for its own embedder).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/config/train_config.h"
#include "engine/data/latent_dataset.h"
#include "engine/data/prefetcher.h"
#include "models/diffusion/ddpm.h"
#include "models/diffusion/denoiser.h"
#include "models/diffusion/flow_matching.h"

namespace wick {

struct ObjectiveBatch {
  Tensor x_t;         // the model's input, f32 [B, C, H, W]
  Tensor model_time;  // f32 [B] in [0, 1]: σ (flow) or t / 1000 (DDPM)
  Tensor target;      // f32, x_t's shape: ε − x0 (flow) or ε (DDPM)
  Tensor weights;     // f32 [B] loss weights (min-SNR-γ), or undefined (all 1)
};

class Objective {
 public:
  explicit Objective(const TrainSection& train);

  // (latent − vae_shift_factor) · vae_scaling_factor, then (x − vae_latents_mean[c]) / vae_latents_std[c] per
  // channel where the dataset has them; f32 (the docs/dataset.md convention). WickError when their length is not C.
  static Tensor scale_latents(const Tensor& latents, const LatentDatasetAttributes& attributes);
  // x0 f32 [B, C, H, W]; ids and epoch key the per-sample random numbers.
  ObjectiveBatch make(const Tensor& x0, const std::vector<int64_t>& ids, int64_t epoch) const;
  // Weighted MSE of pred (any float dtype, cast to f32 through autograd) against the target.
  Tensor loss(const Tensor& pred, const ObjectiveBatch& batch) const;

  NoiseScheduler scheduler() const { return scheduler_; }
  const diffusion::FlowMatchingConfig& flow_config() const { return flow_; }
  const diffusion::DdpmSchedule& ddpm_schedule() const { return ddpm_schedule_; }

 private:
  NoiseScheduler scheduler_;
  uint64_t seed_;
  double min_snr_gamma_;
  diffusion::FlowMatchingConfig flow_;
  diffusion::DdpmSchedule ddpm_schedule_;
  diffusion::DdpmConfig ddpm_;
};

// The flow-matching settings of a train section: σ sampling (logit_normal / uniform / shift = uniform
// with the SD3 shift / flux_shift = logit-normal with Flux's resolution-dependent shift), the SD3
// shift when timestep_shift != 1, the noise offset.
diffusion::FlowMatchingConfig flow_matching_config(const TrainSection& train);

// min-SNR-γ for rectified flow, in ε space as Hang et al. define it: SNR = ((1 − σ)/σ)², and the
// v-MSE weight min(SNR, γ)·σ² = min((1 − σ)², γ·σ²) equals the ε-prediction weight min(SNR, γ)/SNR
// applied to the ε error (1 − σ)·Δv.
double flow_min_snr_weight(double sigma, double gamma);

// The conditioning of a batch with each sample's caption dropped with probability p (size_ids: size_conditioning,
// never dropped): a dropped sample's token embeddings, mask and pooled vector are all zero (the empty caption of
// the hashed word encoder; the unconditional input for classifier-free guidance). Sample i is dropped when
// stream_uniform(derive_stream(seed, id_i, epoch, CaptionDropout), 0) < p.
diffusion::Conditioning drop_captions(const Batch& batch, double p, uint64_t seed, int64_t epoch);

// SDXL's micro-conditioning of a batch, F32 [B, 6] on the latents' device: (original height, width, crop top,
// left, target height, width) in pixels, the target the latents' size x 8 and the crop (0, 0) when the file has
// original_size but no crop; undefined when it has no original_size (the model then takes each sample uncropped
// at its target size).
Tensor size_conditioning(const Batch& batch);

// The latents a step trains on. A batch with latents_logvar (the file stores the VAE's distribution) and
// LatentSampling::Sample gives, row by row, mean + exp(logvar / 2) · ε with ε = randn([C, H, W]) from
// the Philox stream derive_stream(seed, id, epoch, LatentSample) (vae::sample_latents): the same on every
// rank, batch position, resume and device. With Mean, or a file without logvar, batch.latents as they are.
Tensor training_latents(const Batch& batch, LatentSampling sampling, uint64_t seed, int64_t epoch);

}  // namespace wick
