// AutoencoderKL: the VAE of SDXL, SD3 / SD3.5, Flux and FLUX.2 (one architecture, sizes from the weights),
// for inference: images -> latent distribution -> latents -> images, optionally tiled.
//
//   vae::LoadedVae vae = vae::load_vae("FLUX.1-dev");                  // vae/ folder, ae.safetensors, ...
//   vae::VaeMoments m = vae.model->encode(images);                     // images [B, 3, H, W] in [-1, 1]
//   Tensor z = vae::sample_latents(m, derive_stream(seed, sample_id, 0, RngPurpose::Noise));  // or m.mean
//   Tensor latents = vae.model->normalize(z);                          // what the denoiser sees
//   Tensor decoded = vae.model->decode(vae.model->denormalize(latents), {.tile_size = 512});
//
// encode runs the encoder (and quant_conv when the weights have it) and splits the 2z channels into
// mean and logvar, clamping logvar to [-30, 20] (diffusers' and LDM's DiagonalGaussianDistribution).
// decode runs post_quant_conv (when present) and the decoder. Neither applies the latent
// normalization (scaling / shift): normalize / denormalize do, with the config's values. FLUX.2's VAE
// also holds its latent BatchNorm statistics (child "bn", config.latent_patch > 0), which encode and
// decode leave alone: its latents are made by open_flux2_image_vae (flux2_vae.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/module.h"
#include "models/vae/vae_blocks.h"
#include "models/vae/vae_config.h"
#include "models/vae/vae_tiling.h"
#include "runtime/philox.h"

namespace wick::vae {

// The diagonal Gaussian the encoder gives per latent pixel, [B, z_channels, H / f, W / f] each.
struct VaeMoments {
  Tensor mean;
  Tensor logvar;  // clamped to [-30, 20]
};

class AutoencoderKL : public Module {
 public:
  // Checks the config (validate) and builds encoder, decoder, the quant convs and the latent BatchNorm it
  // asks for in config.dtype (the BatchNorm's statistics in f32) on config.device; parameters frozen,
  // uninitialized unless config.initialize.
  explicit AutoencoderKL(VaeConfig config);
  std::string type_name() const override { return "AutoencoderKL"; }

  // images [B, in_channels, H, W], any floating dtype and device (moved and cast to the config's),
  // values in [-1, 1]. H and W should be multiples of the downscale factor f (other sizes are
  // floored, as in diffusers; tiling requires multiples). Returns mean and logvar
  // [B, z_channels, H / f, W / f] in config.dtype on config.device. No autograd graph is recorded.
  // Tiled (see VaeTiling) when tiling.tile_size > 0 and the image is larger than a tile.
  VaeMoments encode(const Tensor& images, const VaeTiling& tiling = {});
  // z [B, z_channels, h, w] (un-normalized latents) -> images [B, out_channels, h·f, w·f] in
  // config.dtype, roughly in [-1, 1] (not clamped). Tiled over the latent when tiling.tile_size > 0
  // and h·f or w·f exceeds it.
  Tensor decode(const Tensor& z, const VaeTiling& tiling = {});

  // (z - shift) * scale and its inverse, with config().normalization.
  Tensor normalize(const Tensor& z) const;
  Tensor denormalize(const Tensor& latents) const;

  const VaeConfig& config() const { return config_; }
  void set_normalization(const LatentNormalization& normalization);

 private:
  TileGrid grid(const VaeTiling& tiling, bool encoding) const;
  VaeConfig config_;
};

// mean + exp(logvar / 2) · ε with ε = randn(mean's shape, stream, offset) (runtime/ops/random.h: the
// same values on every device), computed in f32, returned in mean's dtype on mean's device.
Tensor sample_latents(const VaeMoments& moments, const RngStream& stream, uint64_t offset = 0);
// One stream per batch row (row b draws randn([C, h, w], streams[b])): a sample's latent does not
// depend on the batch it was encoded in.
Tensor sample_latents(const VaeMoments& moments, const std::vector<RngStream>& per_sample);

// Latents [N, C, h, w] in `normalization` (a dataset's) to images [N, 3, H, W] in [0, 1], f32 on the CPU:
// each latent denormalized, decoded on `device` one at a time (the decoder's activations are the peak) and
// mapped from [-1, 1]. What the samplers' grids show.
Tensor decode_to_images(AutoencoderKL& model, const Tensor& latents, const LatentNormalization& normalization,
                        Device device);

}  // namespace wick::vae
