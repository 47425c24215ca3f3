// Rectified-flow training targets (SD3, Flux): x_σ = (1 − σ)·x0 + σ·ε, target v = ε − x0, MSE.
//
//   FlowMatchingConfig cfg;                         // logit-normal σ, no shift
//   cfg.shift = SigmaShift::Resolution;             // Flux: μ from the image token count
//   FlowMatchingBatch b = make_flow_batch(x0, sample_ids, epoch, seed, cfg);
//   Tensor v = model(b.x_t, b.sigma, cond);
//   Tensor loss = flow_matching_loss(v, b.target);  // autograd, 0-d
//
// Randomness: sample i's noise comes from derive_stream(seed, sample_ids[i], epoch, Noise) and its σ
// from derive_stream(seed, sample_ids[i], epoch, Timestep) (runtime/philox.h), so a sample draws
// the same σ and ε whatever its rank, batch or position in the batch.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/tensor.h"

namespace wick::diffusion {

enum class SigmaSampling {
  LogitNormal,  // σ = sigmoid(N(logit_mean, logit_std))   (SD3 / Flux training)
  Uniform,      // σ ~ U[0, 1)
  Mode,         // σ = 1 − u − s·(cos²(πu/2) − 1 + u), u ~ U[0, 1), s = mode_scale (SD3's "mode" density)
};

enum class SigmaShift {
  None,
  Constant,    // SD3: σ' = s·σ / (1 + (s − 1)·σ), s = shift
  Resolution,  // Flux: μ linear in image tokens, σ' = e^μ / (e^μ + 1/σ − 1)
};

struct FlowMatchingConfig {
  SigmaSampling sampling = SigmaSampling::LogitNormal;
  double logit_mean = 0.0;
  double logit_std = 1.0;
  double mode_scale = 1.29;
  SigmaShift shift = SigmaShift::None;
  double shift_value = 3.0;  // SD3's s
  // Flux: μ = base_shift at base_tokens, max_shift at max_tokens, linear in between (and beyond).
  double base_shift = 0.5;
  double max_shift = 1.15;
  int64_t base_tokens = 256;
  int64_t max_tokens = 4096;
  // Image tokens for the Flux shift; 0 = (H/2)·(W/2) from x0 [B, C, H, W] (Flux packs 2×2 latent pixels).
  int64_t image_tokens = 0;
  double noise_offset = 0.0;  // ε += k·N(0, 1)[B, C, 1, 1]; needs x0 of rank >= 2
};

struct FlowMatchingBatch {
  Tensor x_t;     // x0's shape and dtype
  Tensor sigma;   // F32 [B]
  Tensor target;  // ε − x0, x0's shape and dtype
  Tensor noise;   // ε (with the offset added), x0's shape and dtype
};

// SD3's shift σ' = s·σ / (1 + (s − 1)·σ); s > 0, σ in [0, 1].
double sd3_shift(double sigma, double s);
// train.timestep_sampling qwen_shift's line (Qwen-Image's sampling schedule: μ 0.5 at 256 tokens, 0.9 at 8192); its
// base is Flux's.
inline constexpr double kQwenMaxShift = 0.9;
inline constexpr int64_t kQwenMaxTokens = 8192;

// Flux's μ for an image of `tokens` tokens: linear through (base_tokens, base_shift), (max_tokens, max_shift).
double flux_mu(int64_t tokens, double base_shift = 0.5, double max_shift = 1.15, int64_t base_tokens = 256,
               int64_t max_tokens = 4096);
// Flux's shift σ' = e^μ / (e^μ + 1/σ − 1); σ = 0 maps to 0.
double flux_shift(double sigma, double mu);
// The shift `config` asks for, applied to σ (image_tokens must be resolved: > 0 for Resolution).
double apply_sigma_shift(double sigma, const FlowMatchingConfig& config, int64_t image_tokens);
// The image-token count the Flux shift uses for latents of shape `x_shape` (config.image_tokens if set).
int64_t flow_image_tokens(const Shape& x_shape, const FlowMatchingConfig& config);

// σ for one sample before the shift, computed in f32 from the sample's Timestep stream:
// logit-normal uses stream_normal(s, 0), uniform and mode use stream_uniform(s, 0).
double sample_raw_sigma(uint64_t seed, uint64_t sample_id, uint64_t epoch, const FlowMatchingConfig& config);

// x0 [B, ...] floating on any device; sample_ids.size() == B. σ is sampled, shifted, then x_t and the
// target are computed in x0's dtype (σ cast to it).
FlowMatchingBatch make_flow_batch(const Tensor& x0, const std::vector<uint64_t>& sample_ids, uint64_t epoch,
                                  uint64_t seed, const FlowMatchingConfig& config = {});

// mean over all elements of w_b·(pred − target)², through autograd (pred receives the gradient).
// weights: undefined (all 1) or F32 [B], a constant. pred and target have the same shape.
Tensor flow_matching_loss(const Tensor& pred, const Tensor& target, const Tensor& weights = Tensor());

}  // namespace wick::diffusion
