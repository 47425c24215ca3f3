// The sizes of the Wan 2.1 causal 3-D VAE (Qwen-Image's VAE, diffusers' AutoencoderKLQwenImage and
// AutoencoderKLWan) and its per-channel latent normalization.
//
//   WanVaeConfig c = qwenimage_vae_config();        // base 96, (1, 2, 4, 4), 2 residual blocks, z 16
//   Tensor x0 = normalize_wan_latents(mean, c.normalization);       // (z - mean_c) / std_c
//   Tensor z = denormalize_wan_latents(x0, c.normalization);        // x0 · std_c + mean_c
//
// Channels per level: base_dim · dim_mult[i]. The encoder runs num_res_blocks residual blocks per
// level and a downsampling after every level but the last (with a temporal time_conv where
// temporal_downsample[i]); the decoder runs num_res_blocks + 1 per level, coarsest first, and an
// upsampling (halving the channels) after every level but the last (time_conv where the reversed
// temporal_downsample says). Each halves / doubles H and W: 8x for the real model.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/tensor.h"

namespace wick::vae {

// x0 = (z - mean[c]) / std[c] per latent channel c: what the denoiser sees (Qwen-Image's and Wan's
// pipelines); no scaling or shift factor.
struct WanLatentNormalization {
  std::vector<double> mean, std;
};
// Qwen-Image's (and Wan 2.1's: the same 16 pairs) latents_mean / latents_std.
WanLatentNormalization wan21_latent_normalization();

// z [B, C, h, w] or [B, C, T, h, w] (any floating dtype and device; C = mean.size()) ->
// (z - mean_c) / std_c in z's dtype (f32 arithmetic; f64 for f64 z). WickError (Usage) when C differs.
Tensor normalize_wan_latents(const Tensor& z, const WanLatentNormalization& normalization);
// x0 -> x0 · std_c + mean_c, in x0's dtype.
Tensor denormalize_wan_latents(const Tensor& x0, const WanLatentNormalization& normalization);

struct WanVaeConfig {
  int64_t in_channels = 3;  // image channels in and out
  int64_t base_dim = 96;
  std::vector<int64_t> dim_mult = {1, 2, 4, 4};
  int64_t num_res_blocks = 2;
  std::vector<bool> temporal_downsample = {false, true, true};  // one per level but the last
  int64_t z_dim = 16;
  WanLatentNormalization normalization = wan21_latent_normalization();
  bool initialize = false;   // false: parameters allocated uninitialized (weights loaded next)
  DType dtype = DType::F32;  // parameter and compute dtype
  Device device = Device::cpu();

  int64_t n_levels() const { return static_cast<int64_t>(dim_mult.size()); }
  int64_t channels(int64_t level) const { return base_dim * dim_mult[static_cast<size_t>(level)]; }
  // Image pixels per latent pixel along H and W: 2^(levels - 1).
  int64_t downscale() const { return int64_t{1} << (n_levels() - 1); }
};

// Throws WickError (Config) naming the field when the sizes do not make this VAE.
void validate(const WanVaeConfig& config);

// The real Qwen-Image / Wan 2.1 VAE: base 96, (1, 2, 4, 4), 2 residual blocks, temporal (F, T, T), z 16.
WanVaeConfig qwenimage_vae_config();

}  // namespace wick::vae
