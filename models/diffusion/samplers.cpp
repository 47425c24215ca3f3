#include "models/diffusion/samplers.h"

#include <cmath>

#include "engine/autograd/grad_mode.h"
#include "models/diffusion/sampling_watch.h"
#include "runtime/error.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/join.h"
#include "runtime/ops/random.h"
#include "runtime/philox.h"

namespace wick::diffusion {
namespace {

// Whether a and b can be concatenated along the batch axis (both undefined counts as yes).
bool pairs_up(const Tensor& a, const Tensor& b) {
  if (!a.defined() && !b.defined()) return true;
  if (!a.defined() || !b.defined()) return false;
  if (a.dim() != b.dim() || a.dim() < 1 || a.dtype() != b.dtype() || a.device() != b.device()) return false;
  for (int64_t i = 1; i < a.dim(); ++i)
    if (a.shape()[static_cast<size_t>(i)] != b.shape()[static_cast<size_t>(i)]) return false;
  return true;
}

Tensor cat2(const Tensor& a, const Tensor& b) { return a.defined() ? concat({a, b}, 0) : Tensor(); }

Tensor full_t(int64_t n, double value, Device device) {
  return Tensor::from_vector<float>(std::vector<float>(static_cast<size_t>(n), static_cast<float>(value)), {n},
                                    device);
}

void check_noise(const char* op, const Tensor& noise) {
  WICK_CHECK(noise.defined() && noise.dim() >= 1 && is_floating(noise.dtype()), op,
             ": noise must be a floating tensor [B, ...], got ", noise.defined() ? noise.describe() : "undefined");
}

}  // namespace

Tensor guided_prediction(const Denoiser& model, const Tensor& x, const Tensor& t, const Conditioning& cond,
                         const GuidanceConfig& guidance) {
  if (guidance.scale == 1.0) return model(x, t, cond);
  const Conditioning& un = guidance.uncond;
  bool batched = guidance.batched && pairs_up(cond.context, un.context) &&
                 pairs_up(cond.context_mask, un.context_mask) && pairs_up(cond.pooled, un.pooled) &&
                 pairs_up(cond.guidance, un.guidance) && pairs_up(cond.size_ids, un.size_ids);
  Tensor v_cond, v_uncond;
  if (batched) {
    Conditioning both{cat2(cond.context, un.context), cat2(cond.context_mask, un.context_mask),
                      cat2(cond.pooled, un.pooled), cat2(cond.guidance, un.guidance),
                      cat2(cond.size_ids, un.size_ids)};
    Tensor v = model(concat({x, x}, 0), concat({t, t}, 0), both);
    int64_t n = x.shape()[0];
    WICK_CHECK(v.dim() >= 1 && v.shape()[0] == 2 * n, "guided_prediction: the model returned ", v.describe(),
               " for a batch of ", 2 * n);
    v_cond = v.narrow(0, 0, n);
    v_uncond = v.narrow(0, n, n);
  } else {
    v_cond = model(x, t, cond);
    v_uncond = model(x, t, un);
  }
  // v_uncond + g·(v_cond − v_uncond)
  return add(v_uncond, mul(sub(v_cond, v_uncond), guidance.scale));
}

Tensor initial_noise(const Shape& shape, const std::vector<uint64_t>& seeds, DType dtype, Device device) {
  WICK_CHECK(!shape.empty() && static_cast<int64_t>(seeds.size()) == shape[0], "initial_noise: ", seeds.size(),
             " seeds for shape ", shape_string(shape));
  Shape per_sample(shape.begin() + 1, shape.end());
  std::vector<Tensor> parts;
  parts.reserve(seeds.size());
  for (uint64_t seed : seeds) parts.push_back(randn(per_sample, derive_stream(seed, 0, 0, RngPurpose::Noise),
                                                    DType::F32, device));
  return stack(parts, 0).to(dtype);
}

std::vector<double> flow_sigmas(const FlowSamplerConfig& config, const Shape& x_shape) {
  if (!config.sigmas.empty()) {
    const std::vector<double>& s = config.sigmas;
    bool descending = true;
    for (size_t k = 0; k + 1 < s.size(); ++k) descending = descending && s[k + 1] < s[k];
    WICK_CHECK(s.size() >= 2 && descending && s.back() == 0.0 && s.front() <= 1.0,
               "sample_flow_euler: given sigmas must be at least 2 values descending from at most 1 to 0, got ",
               s.size(), " values");
    return s;
  }
  WICK_CHECK(config.n_steps >= 1, "sample_flow_euler: n_steps must be >= 1, got ", config.n_steps);
  FlowMatchingConfig shift;
  shift.shift = config.shift;
  shift.shift_value = config.shift_value;
  shift.image_tokens = config.image_tokens;
  shift.base_shift = config.base_shift;
  shift.max_shift = config.max_shift;
  shift.base_tokens = config.base_tokens;
  shift.max_tokens = config.max_tokens;
  int64_t tokens = flow_image_tokens(x_shape, shift);
  std::vector<double> sigmas(static_cast<size_t>(config.n_steps + 1));
  for (int64_t k = 0; k <= config.n_steps; ++k) {
    double s = 1.0 - static_cast<double>(k) / static_cast<double>(config.n_steps);
    sigmas[static_cast<size_t>(k)] = apply_sigma_shift(s, shift, tokens);
  }
  sigmas.back() = 0.0;
  return sigmas;
}

Tensor sample_flow_euler(const Denoiser& model, const Tensor& noise, const Conditioning& cond,
                         const FlowSamplerConfig& config) {
  check_noise("sample_flow_euler", noise);
  autograd::NoGradGuard no_grad;
  std::vector<double> sigmas = flow_sigmas(config, noise.shape());
  int64_t n = noise.shape()[0];
  Tensor x = noise;
  for (size_t k = 0; k + 1 < sigmas.size(); ++k) {
    Tensor t = full_t(n, sigmas[k], noise.device());
    Tensor v = guided_prediction(model, x, t, cond, config.guidance);
    WICK_CHECK(v.shape() == x.shape(), "sample_flow_euler: the model returned ", v.describe(), " for x ",
               x.describe());
    x = add(x, mul(v.to(x.dtype()), sigmas[k + 1] - sigmas[k]));  // x ← x + (σ_next − σ)·v
    sampling_step_done(static_cast<int64_t>(k + 1), static_cast<int64_t>(sigmas.size() - 1));
  }
  return x;
}

std::vector<int64_t> ddim_timesteps(int64_t n_train_steps, int64_t n_steps) {
  WICK_CHECK(n_steps >= 1 && n_steps <= n_train_steps, "sample_ddim: n_steps must be in [1, ", n_train_steps,
             "], got ", n_steps);
  std::vector<int64_t> ts;
  ts.reserve(static_cast<size_t>(n_steps));
  double ratio = static_cast<double>(n_train_steps) / static_cast<double>(n_steps);
  for (int64_t k = 0; k < n_steps; ++k)
    ts.push_back(static_cast<int64_t>(std::llround(static_cast<double>(n_train_steps) - ratio * static_cast<double>(k))) - 1);
  return ts;
}

Tensor sample_ddim(const Denoiser& model, const Tensor& noise, const Conditioning& cond, const DdpmSchedule& schedule,
                   const DdimConfig& config) {
  check_noise("sample_ddim", noise);
  autograd::NoGradGuard no_grad;
  std::vector<int64_t> ts = ddim_timesteps(schedule.n_steps(), config.n_steps);
  int64_t n = noise.shape()[0];
  Tensor x = noise;
  for (size_t k = 0; k < ts.size(); ++k) {
    double abar = schedule.alphas_cumprod[static_cast<size_t>(ts[k])];
    double abar_prev = k + 1 < ts.size() ? schedule.alphas_cumprod[static_cast<size_t>(ts[k + 1])] : 1.0;
    Tensor t = full_t(n, static_cast<double>(ts[k]), noise.device());
    Tensor eps = guided_prediction(model, x, t, cond, config.guidance);
    WICK_CHECK(eps.shape() == x.shape(), "sample_ddim: the model returned ", eps.describe(), " for x ", x.describe());
    eps = eps.to(x.dtype());
    Tensor x0_hat = div(sub(x, mul(eps, std::sqrt(1.0 - abar))), std::sqrt(abar));
    x = add(mul(x0_hat, std::sqrt(abar_prev)), mul(eps, std::sqrt(1.0 - abar_prev)));
    sampling_step_done(static_cast<int64_t>(k + 1), static_cast<int64_t>(ts.size()));
  }
  return x;
}

}  // namespace wick::diffusion
