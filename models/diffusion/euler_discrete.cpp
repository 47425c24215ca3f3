#include "models/diffusion/euler_discrete.h"

#include <algorithm>
#include <cmath>

#include "engine/autograd/grad_mode.h"
#include "models/diffusion/sampling_watch.h"
#include "runtime/error.h"
#include "runtime/ops/elementwise.h"

namespace wick::diffusion {
namespace {

// torch.linspace(start, end, n, dtype=float32) as its CPU kernel computes it: step in float32, the first half
// start + step·i and the second end − step·(n − 1 − i), each one fused multiply-add (exact product, one rounding).
std::vector<float> linspace_f32(double start, double end, int64_t n) {
  const auto first = static_cast<float>(start), last = static_cast<float>(end);
  const float step = n > 1 ? (last - first) / static_cast<float>(n - 1) : 0.0f;
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    out[static_cast<size_t>(i)] =
        i < n / 2 ? static_cast<float>(std::fma(static_cast<double>(step), static_cast<double>(i), first))
                  : static_cast<float>(std::fma(-static_cast<double>(step), static_cast<double>(n - 1 - i), last));
  }
  return out;
}

}  // namespace

EulerDiscreteSchedule euler_discrete_schedule(int64_t steps, const EulerDiscreteOptions& options) {
  const int64_t n = options.n_train_steps;
  WICK_CHECK_KIND(Config, n >= 1, "euler_discrete_schedule: n_train_steps must be >= 1, got ", n);
  WICK_CHECK_KIND(Config, steps >= 1 && steps <= n, "sampling steps must be in [1, ", n, "] (the training schedule's ",
                  "timesteps), got ", steps);
  WICK_CHECK_KIND(Config, options.steps_offset >= 0, "euler_discrete_schedule: steps_offset must be >= 0, got ",
                  options.steps_offset);
  WICK_CHECK_KIND(Config, options.beta_start > 0 && options.beta_end > options.beta_start && options.beta_end < 1,
                  "euler_discrete_schedule: betas must satisfy 0 < beta_start < beta_end < 1, got ", options.beta_start,
                  " and ", options.beta_end);
  // diffusers: betas = linspace(√β0, √β1)² and alphas_cumprod = cumprod(1 − betas), float32 tensors (the product
  // accumulated in double by torch's CPU kernel); σ = ((1 − ᾱ)/ᾱ)^0.5 in float32.
  const std::vector<float> roots = linspace_f32(std::sqrt(options.beta_start), std::sqrt(options.beta_end), n);
  std::vector<float> table(static_cast<size_t>(n));
  double product = 1.0;
  for (int64_t t = 0; t < n; ++t) {
    const float root = roots[static_cast<size_t>(t)];
    const float alpha = 1.0f - root * root;
    product *= static_cast<double>(alpha);
    const auto alpha_bar = static_cast<float>(product);
    table[static_cast<size_t>(t)] = std::sqrt((1.0f - alpha_bar) / alpha_bar);
  }

  EulerDiscreteSchedule out;
  const int64_t ratio = n / steps;
  for (int64_t k = steps - 1; k >= 0; --k) {
    const int64_t t = k * ratio + options.steps_offset;
    out.timesteps.push_back(t);
    out.sigmas.push_back(table[static_cast<size_t>(std::min(t, n - 1))]);
  }
  out.sigmas.push_back(0.0f);
  const float max_sigma = *std::max_element(out.sigmas.begin(), out.sigmas.end());
  out.init_noise_sigma = std::sqrt(max_sigma * max_sigma + 1.0f);
  return out;
}

Tensor sample_euler_discrete(const Denoiser& model, const Tensor& noise, const Conditioning& cond,
                             const EulerDiscreteSchedule& schedule, const EulerDiscreteConfig& config) {
  WICK_CHECK(noise.defined() && noise.dim() >= 1 && noise.dtype() == DType::F32,
             "sample_euler_discrete: noise must be f32 [B, ...], got ", noise.defined() ? noise.describe() : "undefined");
  WICK_CHECK(!schedule.timesteps.empty() && schedule.sigmas.size() == schedule.timesteps.size() + 1,
             "sample_euler_discrete: a schedule needs steps timesteps and steps + 1 sigmas, got ",
             schedule.timesteps.size(), " and ", schedule.sigmas.size());
  autograd::NoGradGuard no_grad;
  const int64_t batch = noise.size(0);
  Tensor x = mul(noise, static_cast<double>(schedule.init_noise_sigma));
  for (size_t k = 0; k < schedule.timesteps.size(); ++k) {
    const float sigma = schedule.sigmas[k], sigma_next = schedule.sigmas[k + 1];
    const float input_scale = std::sqrt(sigma * sigma + 1.0f);  // scale_model_input: x / √(σ² + 1)
    const Tensor t = Tensor::from_vector<float>(
        std::vector<float>(static_cast<size_t>(batch), static_cast<float>(schedule.timesteps[k])), {batch},
        noise.device());
    Tensor prediction = guided_prediction(model, div(x, static_cast<double>(input_scale)), t, cond, config.guidance);
    WICK_CHECK(prediction.shape() == x.shape(), "sample_euler_discrete: the model returned ", prediction.describe(),
               " for x ", x.describe());
    prediction = prediction.to(DType::F32);
    // x̂0 = x − σ·ε̂, or −σ/√(σ² + 1)·v̂ + x/(σ² + 1)
    const Tensor x0 = config.v_prediction
                          ? add(mul(prediction, static_cast<double>(-sigma / input_scale)),
                                div(x, static_cast<double>(sigma * sigma + 1.0f)))
                          : sub(x, mul(prediction, static_cast<double>(sigma)));
    // x ← x + (x − x̂0)/σ · (σ_next − σ)
    const Tensor derivative = div(sub(x, x0), static_cast<double>(sigma));
    x = add(x, mul(derivative, static_cast<double>(sigma_next - sigma)));
    sampling_step_done(static_cast<int64_t>(k + 1), static_cast<int64_t>(schedule.timesteps.size()));
  }
  return x;
}

}  // namespace wick::diffusion
