// Euler sampling of a DDPM-trained ε- or v-predictor, as diffusers' EulerDiscreteScheduler runs it with SDXL's
// scheduler_config.json (scaled-linear β 0.00085 .. 0.012, 1000 steps, timestep_spacing "leading", steps_offset 1,
// linear interpolation, no Karras sigmas, final σ 0, s_churn 0).
//
//   EulerDiscreteSchedule s = euler_discrete_schedule(30);   // SDXL's
//   s.timesteps;          // 967, 934, ..., 1  (leading: k·(1000 / 30) reversed, + 1)
//   s.sigmas;             // √((1 − ᾱ_t)/ᾱ_t) at each, then 0
//   Tensor x0 = sample_euler_discrete(model, noise, cond, s, {.guidance = {.scale = 5.0, .uncond = negative}});
//
// In the latent space of σ: x = noise · √(σ_max² + 1) ("leading" spacing's init_noise_sigma), then per step the model
// sees x / √(σ² + 1) at the timestep t, and x ← x + (x − x̂0)/σ · (σ_next − σ) with x̂0 = x − σ·ε̂ (ε-prediction) or
// x̂0 = −σ/√(σ² + 1)·v̂ + x/(σ² + 1) (v-prediction). Scalars are float32 as in diffusers' tensors.
#pragma once

#include <cstdint>
#include <vector>

#include "models/diffusion/ddpm.h"
#include "models/diffusion/samplers.h"

namespace wick::diffusion {

struct EulerDiscreteSchedule {
  std::vector<int64_t> timesteps;  // steps values, descending: the model's t
  std::vector<float> sigmas;       // steps + 1 values: σ at each timestep, then 0
  float init_noise_sigma = 1.0f;   // √(σ_max² + 1)
};

// The training schedule (scaled-linear β) and the spacing's offset; SDXL's values by default.
struct EulerDiscreteOptions {
  int64_t n_train_steps = 1000;
  double beta_start = 0.00085, beta_end = 0.012;
  int64_t steps_offset = 1;
};

// "leading" spacing: ratio = n_train // steps, timesteps k·ratio for k = steps − 1 .. 0, plus steps_offset; σ_t =
// √((1 − ᾱ_t)/ᾱ_t) with ᾱ computed as diffusers does (β = linspace(√β_start, √β_end)² in float32, the cumulative
// product accumulated in double and stored in float32), so the σ are diffusers' float32 values bit for bit; a
// timestep past the table takes its last σ (np.interp). steps in [1, n_train], steps_offset >= 0; WickError (Config)
// otherwise.
EulerDiscreteSchedule euler_discrete_schedule(int64_t steps, const EulerDiscreteOptions& options = {});

struct EulerDiscreteConfig {
  GuidanceConfig guidance;     // classifier-free guidance on the model's prediction
  bool v_prediction = false;   // the model predicts v = √ᾱ·ε − √(1 − ᾱ)·x0 instead of ε
};

// noise [B, ...] f32 (standard normal, not yet scaled) -> the clean latents f32, under NoGradGuard. The model gets
// t F32 [B] = the integer timestep.
Tensor sample_euler_discrete(const Denoiser& model, const Tensor& noise, const Conditioning& cond,
                             const EulerDiscreteSchedule& schedule, const EulerDiscreteConfig& config);

}  // namespace wick::diffusion
