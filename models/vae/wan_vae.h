// The Wan 2.1 causal 3-D VAE as Qwen-Image uses it (diffusers' AutoencoderKLQwenImage), for single
// images (T = 1): images -> latent distribution -> latents -> images. Weights: wan_vae_weights.h.
//
//   vae::LoadedWanVae vae = vae::load_wan_vae("Qwen-Image");          // vae/ folder or qwen_image_vae.safetensors
//   vae::VaeMoments m = vae.model->encode(images);                     // [B, 3, H, W] (or [B, 3, 1, H, W]) in [-1, 1]
//   Tensor x0 = vae.model->normalize(m.mean);                          // (mean - mean_c) / std_c: what the denoiser sees
//   Tensor decoded = vae.model->decode(vae.model->denormalize(x0));    // [B, 3, H, W] in [-1, 1] (clamped)
//
// encode runs the encoder and the quant conv ("conv1") and splits the 2z channels into mean and logvar,
// logvar clamped to [-30, 20] (diffusers' DiagonalGaussianDistribution); vae::sample_latents (vae.h)
// draws from it. decode runs the post-quant conv ("conv2") and the decoder and clamps to [-1, 1]. A
// 5-D input must have T = 1 (one frame) and gives a 5-D output; videos (T > 1, the causal time path
// with time_conv) are not implemented.
#pragma once

#include <string>

#include "engine/module.h"
#include "models/vae/vae.h"
#include "models/vae/wan_vae_blocks.h"
#include "models/vae/wan_vae_config.h"

namespace wick::vae {

class WanVae : public Module {
 public:
  // Checks the config (validate) and builds encoder, decoder, conv1 (quant, 2z -> 2z) and conv2
  // (post-quant, z -> z) in config.dtype on config.device; frozen, uninitialized unless config.initialize.
  explicit WanVae(WanVaeConfig config);
  std::string type_name() const override { return "WanVae"; }

  // images [B, in_channels, H, W] or [B, in_channels, 1, H, W], any floating dtype and device (moved
  // and cast to the config's), values in [-1, 1]; H and W at least the downscale factor f (other than
  // multiples are floored, as in diffusers). mean and logvar [B, z_dim, H / f, W / f] (5-D input:
  // [B, z_dim, 1, h, w]) in config.dtype on config.device. No autograd graph is recorded.
  VaeMoments encode(const Tensor& images);
  // z [B, z_dim, h, w] or [B, z_dim, 1, h, w] (un-normalized latents) -> images [B, in_channels, h·f,
  // w·f] (5-D in, 5-D out) in config.dtype, clamped to [-1, 1].
  Tensor decode(const Tensor& z);

  // (z - mean_c) / std_c and its inverse, with config().normalization.
  Tensor normalize(const Tensor& z) const;
  Tensor denormalize(const Tensor& x0) const;

  const WanVaeConfig& config() const { return config_; }

 private:
  WanVaeConfig config_;
};

}  // namespace wick::vae
