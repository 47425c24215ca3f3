#include "models/diffusion/flow_matching.h"

#include <algorithm>
#include <cmath>

#include "engine/autograd/ops_elementwise.h"
#include "engine/autograd/ops_loss.h"
#include "engine/autograd/ops_reduce.h"
#include "models/diffusion/noise.h"
#include "runtime/error.h"
#include "runtime/ops/elementwise.h"
#include "runtime/philox.h"

namespace wick::diffusion {

double sd3_shift(double sigma, double s) {
  WICK_CHECK(s > 0.0, "sd3_shift: shift must be > 0, got ", s);
  return s * sigma / (1.0 + (s - 1.0) * sigma);
}

double flux_mu(int64_t tokens, double base_shift, double max_shift, int64_t base_tokens, int64_t max_tokens) {
  WICK_CHECK(max_tokens != base_tokens, "flux_mu: base_tokens and max_tokens must differ, both ", base_tokens);
  double slope = (max_shift - base_shift) / static_cast<double>(max_tokens - base_tokens);
  return base_shift + slope * static_cast<double>(tokens - base_tokens);
}

double flux_shift(double sigma, double mu) {
  if (sigma <= 0.0) return 0.0;
  double e = std::exp(mu);
  return e / (e + 1.0 / sigma - 1.0);
}

double apply_sigma_shift(double sigma, const FlowMatchingConfig& config, int64_t image_tokens) {
  switch (config.shift) {
    case SigmaShift::None: return sigma;
    case SigmaShift::Constant: return sd3_shift(sigma, config.shift_value);
    case SigmaShift::Resolution:
      WICK_CHECK(image_tokens > 0, "flow shift: the Flux shift needs image_tokens > 0, got ", image_tokens);
      return flux_shift(sigma, flux_mu(image_tokens, config.base_shift, config.max_shift, config.base_tokens,
                                       config.max_tokens));
  }
  return sigma;
}

int64_t flow_image_tokens(const Shape& x_shape, const FlowMatchingConfig& config) {
  if (config.image_tokens > 0) return config.image_tokens;
  if (config.shift != SigmaShift::Resolution) return 0;
  WICK_CHECK(x_shape.size() == 4, "flow shift: deriving Flux image tokens needs latents [B, C, H, W], got ",
             shape_string(x_shape), "; set image_tokens");
  return (x_shape[2] / 2) * (x_shape[3] / 2);
}

double sample_raw_sigma(uint64_t seed, uint64_t sample_id, uint64_t epoch, const FlowMatchingConfig& config) {
  RngStream s = derive_stream(seed, sample_id, epoch, RngPurpose::Timestep);
  if (config.sampling == SigmaSampling::Uniform) return static_cast<double>(stream_uniform(s, 0));
  if (config.sampling == SigmaSampling::Mode) {
    const double u = static_cast<double>(stream_uniform(s, 0)), c = std::cos(M_PI * u / 2.0);
    return std::clamp(1.0 - u - config.mode_scale * (c * c - 1.0 + u), 0.0, 1.0);
  }
  double z = static_cast<double>(stream_normal(s, 0));
  double logit = config.logit_mean + config.logit_std * z;
  return 1.0 / (1.0 + std::exp(-logit));
}

FlowMatchingBatch make_flow_batch(const Tensor& x0, const std::vector<uint64_t>& sample_ids, uint64_t epoch,
                                  uint64_t seed, const FlowMatchingConfig& config) {
  WICK_CHECK(x0.defined() && x0.dim() >= 1, "make_flow_batch: x0 must have a batch axis");
  WICK_CHECK(is_floating(x0.dtype()), "make_flow_batch: x0 must be floating, got ", dtype_name(x0.dtype()));
  int64_t n = x0.shape()[0];
  WICK_CHECK(static_cast<int64_t>(sample_ids.size()) == n, "make_flow_batch: ", sample_ids.size(),
             " sample ids for x0 ", x0.describe());
  WICK_CHECK(config.logit_std >= 0.0, "make_flow_batch: logit_std must be >= 0, got ", config.logit_std);
  int64_t tokens = flow_image_tokens(x0.shape(), config);
  std::vector<float> sigmas(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    double sigma = sample_raw_sigma(seed, sample_ids[static_cast<size_t>(i)], epoch, config);
    sigmas[static_cast<size_t>(i)] = static_cast<float>(apply_sigma_shift(sigma, config, tokens));
  }
  FlowMatchingBatch batch;
  batch.sigma = Tensor::from_vector<float>(sigmas, {n}, x0.device());
  batch.noise = sample_noise(x0.shape(), sample_ids, epoch, seed, config.noise_offset, x0.dtype(), x0.device());
  Tensor sigma_b = per_sample_view(batch.sigma, x0.dim()).to(x0.dtype());
  // x_σ = (1 − σ)·x0 + σ·ε
  batch.x_t = add(mul(sub(1.0, sigma_b), x0), mul(sigma_b, batch.noise));
  batch.target = sub(batch.noise, x0);
  return batch;
}

Tensor flow_matching_loss(const Tensor& pred, const Tensor& target, const Tensor& weights) {
  WICK_CHECK(pred.shape() == target.shape(), "flow_matching_loss: pred ", pred.describe(), " and target ",
             target.describe(), " differ in shape");
  Tensor err = autograd::mse_loss(pred, target, autograd::Reduction::None);
  if (weights.defined()) {
    WICK_CHECK(weights.dim() == 1 && pred.dim() >= 1 && weights.shape()[0] == pred.shape()[0],
               "flow_matching_loss: weights must be [B] for pred ", pred.describe(), ", got ", weights.describe());
    Tensor w = per_sample_view(weights.to(err.device()), err.dim()).to(err.dtype());
    err = autograd::mul(err, w);
  }
  return autograd::mean(err);
}

}  // namespace wick::diffusion
