// The sizes of an AutoencoderKL (the VAE that SDXL, SD3 / SD3.5, Flux and FLUX.2 share, with different
// latent channels, quant convs and, in FLUX.2's, a latent BatchNorm) and the latent normalization a
// model applies to it (each architecture names its own: DatasetSpec::normalization, models/architecture.h).
//
//   VaeConfig c = ldm_vae_config(16, false);     // ch 128, (1, 2, 4, 4), 2 / 3 ResBlocks, z 16, no quant convs
//   LatentNormalization n{0.3611, 0.1159};       // Flux's: latents = (z - 0.1159) * 0.3611
//   Tensor latents = normalize_latents(z, n);
//   Tensor z_again = denormalize_latents(latents, n);
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace wick::vae {

// What the denoiser sees: latents = (z - shift_factor) * scaling_factor (BFL's AutoEncoder.encode,
// diffusers' pipelines); the inverse before decoding.
struct LatentNormalization {
  double scaling_factor = 1.0;
  double shift_factor = 0.0;
};
// (SDXL 0.13025 / 0, SD3 1.5305 / 0.0609, Flux 0.3611 / 0.1159: MODELS.md 1.5; never SD1's 0.18215.)

// z [B, C, h, w] (any floating dtype and device) -> (z - shift) * scale, in z's dtype (f32 arithmetic).
Tensor normalize_latents(const Tensor& z, const LatentNormalization& normalization);
// latents -> latents / scale + shift, in the latents' dtype.
Tensor denormalize_latents(const Tensor& latents, const LatentNormalization& normalization);

struct VaeConfig {
  int64_t in_channels = 3, out_channels = 3;
  // Channels of each resolution level, finest first (LDM's ch * ch_mult, diffusers' block_out_channels);
  // the encoder halves the resolution after every level but the last.
  std::vector<int64_t> block_channels = {128, 256, 512, 512};
  int64_t encoder_blocks = 2;    // ResBlocks per level in the encoder (LDM num_res_blocks)
  int64_t decoder_blocks = 3;    // ResBlocks per level in the decoder (num_res_blocks + 1)
  int64_t z_channels = 16;       // latent channels; the encoder outputs 2 * z_channels (mean, logvar)
  bool quant_conv = false;       // 1x1 conv on the encoder's 2z output (SDXL's VAE has both)
  bool post_quant_conv = false;  // 1x1 conv on z before the decoder
  bool mid_attention = true;     // the mid blocks' single-head spatial attention (all four families)
  // FLUX.2's latent BatchNorm (bn.running_mean, bn.running_var, latent_patch² · z_channels values each): its
  // latents are the posterior mean patchified latent_patch x latent_patch and normalized by those running
  // statistics (models/vae/flux2_vae.h). 0: none (SDXL, SD3, Flux).
  int64_t latent_patch = 0;
  double batch_norm_eps = 1e-4;  // that BatchNorm's eps (config.json batch_norm_eps; BFL's code: 1e-4)
  int64_t norm_groups = 32;      // GroupNorm groups (every real VAE: 32)
  double norm_eps = 1e-6;
  LatentNormalization normalization;
  // Query rows per attention step of the mid blocks (scores [B, rows, h·w] in f32 at a time); 0: as
  // many as fit 64 MiB of scores.
  int64_t attention_query_chunk = 0;
  bool initialize = false;   // false: parameters allocated uninitialized (weights loaded next)
  DType dtype = DType::F32;  // parameter and compute dtype (f32 or bf16; SDXL's VAE overflows in f16)
  Device device = Device::cpu();

  int64_t n_levels() const { return static_cast<int64_t>(block_channels.size()); }
  // Image pixels per latent pixel along each axis: 2^(levels - 1) (8 for the real VAEs).
  int64_t downscale() const { return int64_t{1} << (n_levels() - 1); }
};

// Throws WickError (Config) naming the field when the sizes do not make a VAE (no levels,
// non-positive sizes, channels not divisible by norm_groups, a negative chunk or latent_patch, an eps <= 0).
void validate(const VaeConfig& config);

// The real LDM VAE: ch 128, ch_mult (1, 2, 4, 4), 2 / 3 ResBlocks, GroupNorm(32, 1e-6), mid attention, with
// `z_channels` latent channels (SDXL 4, SD3 and Flux 16) and quant_conv / post_quant_conv when `quant_convs` (SDXL);
// normalization at its default (scale 1, shift 0).
VaeConfig ldm_vae_config(int64_t z_channels, bool quant_convs);

// Every parameter of an AutoencoderKL with `config`, by its (LDM) name, with its shape (with latent_patch > 0,
// bn.running_mean and bn.running_var too).
std::map<std::string, Shape> parameter_shapes(const VaeConfig& config);

}  // namespace wick::vae
