// Samplers: Euler for rectified flow, DDIM (η = 0) for ε-prediction, classifier-free guidance.
//
//   Tensor x = initial_noise({4, 16, 64, 64}, seeds);          // seeds[i] keys sample i's noise
//   FlowSamplerConfig fc; fc.n_steps = 28; fc.shift = SigmaShift::Constant; fc.guidance.scale = 4.5;
//   fc.guidance.uncond = empty_text;                          // the unconditional Conditioning
//   Tensor x0 = sample_flow_euler(model, x, cond, fc);
//   Tensor y0 = sample_ddim(eps_model, x, cond, DdpmSchedule::scaled_linear(), {.n_steps = 30});
//
// Samplers run under NoGradGuard. Guidance with scale != 1 evaluates the model on the conditional and
// unconditional inputs; when every conditioning tensor pairs up (both defined with shapes equal but
// for the batch axis, or both undefined) they run as one forward of batch 2B, else as two forwards.
#pragma once

#include <cstdint>
#include <vector>

#include "models/diffusion/ddpm.h"
#include "models/diffusion/denoiser.h"
#include "models/diffusion/flow_matching.h"

namespace wick::diffusion {

struct GuidanceConfig {
  double scale = 1.0;  // 1: the conditional prediction only (one forward)
  Conditioning uncond;  // e.g. zeroed context / mask, batch B like the conditional one
  bool batched = true;  // allow the single 2B forward
};

// v_uncond + g·(v_cond − v_uncond), or model(x, t, cond) when g == 1.
Tensor guided_prediction(const Denoiser& model, const Tensor& x, const Tensor& t, const Conditioning& cond,
                         const GuidanceConfig& guidance);

// Standard normal [B, ...] with sample i drawn from derive_stream(seeds[i], 0, 0, Noise): the same
// image for the same seed whatever the batch. Computed in f32, cast to dtype.
Tensor initial_noise(const Shape& shape, const std::vector<uint64_t>& seeds, DType dtype = DType::F32,
                     Device device = Device::cpu());

struct FlowSamplerConfig {
  int64_t n_steps = 28;
  SigmaShift shift = SigmaShift::None;
  double shift_value = 3.0;   // SD3's s
  int64_t image_tokens = 0;   // Flux shift; 0 = (H/2)·(W/2) from x's shape
  double base_shift = 0.5, max_shift = 1.15;
  int64_t base_tokens = 256, max_tokens = 4096;
  GuidanceConfig guidance;
  // Given: the schedule itself (n_steps + 1 values, descending, the last 0: SD3's, models/sd3/sd3_sampler.h);
  // n_steps and the shift settings are then not used.
  std::vector<double> sigmas;
};

// The n_steps + 1 σ values, 1 .. 0, of linspace(1, 0, n_steps + 1) after the shift; config.sigmas when given.
std::vector<double> flow_sigmas(const FlowSamplerConfig& config, const Shape& x_shape);

// Euler steps x ← x + (σ_next − σ)·v from x = noise at σ = 1 to σ = 0; t passed to the model is σ (F32 [B]).
Tensor sample_flow_euler(const Denoiser& model, const Tensor& noise, const Conditioning& cond,
                         const FlowSamplerConfig& config);

struct DdimConfig {
  int64_t n_steps = 30;
  GuidanceConfig guidance;
};

// The timesteps DDIM visits, descending ("trailing" spacing: round(n·(1 − k/N)) − 1, k = 0..N−1,
// so the first is n − 1).
std::vector<int64_t> ddim_timesteps(int64_t n_train_steps, int64_t n_steps);

// DDIM with η = 0 for an ε-predictor: x0̂ = (x − √(1−ᾱ_t) ε̂)/√ᾱ_t, x ← √ᾱ_prev x0̂ + √(1−ᾱ_prev) ε̂,
// ᾱ_prev = 1 after the last step (returns the clean sample). t passed to the model: the timestep, F32 [B].
Tensor sample_ddim(const Denoiser& model, const Tensor& noise, const Conditioning& cond, const DdpmSchedule& schedule,
                   const DdimConfig& config);

}  // namespace wick::diffusion
