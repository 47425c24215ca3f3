#include "models/diffusion/ddpm.h"

#include <algorithm>
#include <cmath>

#include "models/diffusion/flow_matching.h"
#include "models/diffusion/noise.h"
#include "runtime/error.h"
#include "runtime/ops/elementwise.h"
#include "runtime/philox.h"

namespace wick::diffusion {

DdpmSchedule DdpmSchedule::scaled_linear(int64_t n_steps, double beta_start, double beta_end) {
  WICK_CHECK(n_steps >= 2, "DdpmSchedule::scaled_linear: n_steps must be >= 2, got ", n_steps);
  WICK_CHECK(beta_start > 0.0 && beta_end < 1.0 && beta_start <= beta_end,
             "DdpmSchedule::scaled_linear: need 0 < beta_start <= beta_end < 1, got ", beta_start, ", ", beta_end);
  DdpmSchedule s;
  s.betas.resize(static_cast<size_t>(n_steps));
  s.alphas_cumprod.resize(static_cast<size_t>(n_steps));
  double lo = std::sqrt(beta_start), hi = std::sqrt(beta_end), prod = 1.0;
  for (int64_t t = 0; t < n_steps; ++t) {
    double r = lo + (hi - lo) * static_cast<double>(t) / static_cast<double>(n_steps - 1);
    s.betas[static_cast<size_t>(t)] = r * r;
    prod *= 1.0 - r * r;
    s.alphas_cumprod[static_cast<size_t>(t)] = prod;
  }
  return s;
}

int64_t sample_timestep(uint64_t seed, uint64_t sample_id, uint64_t epoch, int64_t n_steps) {
  RngStream s = derive_stream(seed, sample_id, epoch, RngPurpose::Timestep);
  double u = static_cast<double>(stream_uniform(s, 0));
  return std::min(static_cast<int64_t>(std::floor(u * static_cast<double>(n_steps))), n_steps - 1);
}

std::vector<double> min_snr_weights(const DdpmSchedule& schedule, const std::vector<int64_t>& timesteps,
                                    double gamma, bool v_prediction) {
  WICK_CHECK(gamma > 0.0, "min_snr_weights: gamma must be > 0, got ", gamma);
  std::vector<double> w;
  w.reserve(timesteps.size());
  for (int64_t t : timesteps) {
    WICK_CHECK(t >= 0 && t < schedule.n_steps(), "min_snr_weights: timestep ", t, " outside [0, ",
               schedule.n_steps(), ")");
    double snr = schedule.snr(t);
    w.push_back(std::min(snr, gamma) / (v_prediction ? snr + 1.0 : snr));
  }
  return w;
}

DdpmBatch make_ddpm_batch(const Tensor& x0, const std::vector<uint64_t>& sample_ids, uint64_t epoch, uint64_t seed,
                          const DdpmSchedule& schedule, const DdpmConfig& config) {
  WICK_CHECK(x0.defined() && x0.dim() >= 1, "make_ddpm_batch: x0 must have a batch axis");
  WICK_CHECK(is_floating(x0.dtype()), "make_ddpm_batch: x0 must be floating, got ", dtype_name(x0.dtype()));
  int64_t n = x0.shape()[0];
  WICK_CHECK(static_cast<int64_t>(sample_ids.size()) == n, "make_ddpm_batch: ", sample_ids.size(),
             " sample ids for x0 ", x0.describe());
  WICK_CHECK(schedule.n_steps() > 0, "make_ddpm_batch: empty schedule");
  std::vector<int64_t> ts(static_cast<size_t>(n));
  std::vector<float> t_f(ts.size()), a_f(ts.size()), b_f(ts.size()), w_f(ts.size(), 1.0f);
  for (size_t i = 0; i < ts.size(); ++i) {
    ts[i] = sample_timestep(seed, sample_ids[i], epoch, schedule.n_steps());
    double abar = schedule.alphas_cumprod[static_cast<size_t>(ts[i])];
    t_f[i] = static_cast<float>(ts[i]);
    a_f[i] = static_cast<float>(std::sqrt(abar));
    b_f[i] = static_cast<float>(std::sqrt(1.0 - abar));
  }
  if (config.min_snr_gamma > 0.0) {
    std::vector<double> w = min_snr_weights(schedule, ts, config.min_snr_gamma, config.v_prediction);
    for (size_t i = 0; i < w.size(); ++i) w_f[i] = static_cast<float>(w[i]);
  }
  DdpmBatch batch;
  batch.timesteps = Tensor::from_vector<float>(t_f, {n}, x0.device());
  batch.weights = Tensor::from_vector<float>(w_f, {n}, x0.device());
  batch.target = sample_noise(x0.shape(), sample_ids, epoch, seed, config.noise_offset, x0.dtype(), x0.device());
  Tensor a = per_sample_view(Tensor::from_vector<float>(a_f, {n}, x0.device()), x0.dim()).to(x0.dtype());
  Tensor b = per_sample_view(Tensor::from_vector<float>(b_f, {n}, x0.device()), x0.dim()).to(x0.dtype());
  batch.x_t = add(mul(a, x0), mul(b, batch.target));  // √ᾱ_t·x0 + √(1 − ᾱ_t)·ε
  if (config.v_prediction) batch.target = sub(mul(a, batch.target), mul(b, x0));  // v = √ᾱ_t·ε − √(1 − ᾱ_t)·x0
  return batch;
}

Tensor ddpm_loss(const Tensor& pred, const DdpmBatch& batch) {
  return flow_matching_loss(pred, batch.target, batch.weights);
}

}  // namespace wick::diffusion
