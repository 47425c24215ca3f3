// DDPM training targets (SDXL, SD 1.x / 2.x): scaled-linear β, x_t = √ᾱ_t·x0 + √(1 − ᾱ_t)·ε, the target ε
// (ε-prediction) or v = √ᾱ_t·ε − √(1 − ᾱ_t)·x0 (v-prediction), min-SNR-γ.
//
//   DdpmSchedule sched = DdpmSchedule::scaled_linear();          // 1000 steps, β 0.00085 .. 0.012
//   DdpmConfig cfg; cfg.min_snr_gamma = 5.0; cfg.noise_offset = 0.0357;
//   DdpmBatch b = make_ddpm_batch(x0, sample_ids, epoch, seed, sched, cfg);
//   Tensor eps = model(b.x_t, b.timesteps, cond);
//   Tensor loss = ddpm_loss(eps, b);                             // autograd, 0-d
//
// Randomness as flow_matching.h: sample i's ε from its Noise stream, t from its Timestep stream
// (t = min(floor(u·n_steps), n_steps − 1), u = stream_uniform(s, 0)).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/tensor.h"

namespace wick::diffusion {

struct DdpmSchedule {
  std::vector<double> betas;           // [n_steps]
  std::vector<double> alphas_cumprod;  // ᾱ_t = Π_{s<=t} (1 − β_s), double
  int64_t n_steps() const { return static_cast<int64_t>(betas.size()); }
  double snr(int64_t t) const { return alphas_cumprod.at(t) / (1.0 - alphas_cumprod.at(t)); }

  // β linear in √β from √beta_start to √beta_end (diffusers' "scaled_linear").
  static DdpmSchedule scaled_linear(int64_t n_steps = 1000, double beta_start = 0.00085, double beta_end = 0.012);
};

struct DdpmConfig {
  double min_snr_gamma = 0.0;  // > 0: weights min(SNR, γ)/SNR; 0: all weights 1
  double noise_offset = 0.0;   // ε += k·N(0, 1)[B, C, 1, 1]; needs x0 of rank >= 2
  // The target v = √ᾱ·ε − √(1 − ᾱ)·x0 instead of ε; min-SNR-γ then weights min(SNR, γ)/(SNR + 1), the v-space
  // form of the same ε-space weight (diffusers' and kohya's v-prediction rule).
  bool v_prediction = false;
};

struct DdpmBatch {
  Tensor x_t;        // x0's shape and dtype
  Tensor timesteps;  // F32 [B], integer values in [0, n_steps)
  Tensor target;     // ε (with the offset added), or v from that ε; x0's shape and dtype
  Tensor weights;    // F32 [B]: min-SNR-γ weights, or ones
};

// Timestep for one sample from its Timestep stream.
int64_t sample_timestep(uint64_t seed, uint64_t sample_id, uint64_t epoch, int64_t n_steps);

// min(SNR_t, γ) / SNR_t for each t (γ > 0); min(SNR_t, γ) / (SNR_t + 1) with v_prediction.
std::vector<double> min_snr_weights(const DdpmSchedule& schedule, const std::vector<int64_t>& timesteps, double gamma,
                                    bool v_prediction = false);

// x0 [B, ...] floating on any device; sample_ids.size() == B.
DdpmBatch make_ddpm_batch(const Tensor& x0, const std::vector<uint64_t>& sample_ids, uint64_t epoch, uint64_t seed,
                          const DdpmSchedule& schedule, const DdpmConfig& config = {});

// flow_matching_loss(pred, batch.target, batch.weights): weighted MSE through autograd.
Tensor ddpm_loss(const Tensor& pred, const DdpmBatch& batch);

}  // namespace wick::diffusion
