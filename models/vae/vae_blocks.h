// The layers of the AutoencoderKL, with LDM's (and BFL's ae.safetensors) parameter names: ResBlocks,
// single-head spatial attention, stride-2 downsampling, nearest x2 upsampling, and the encoder and
// decoder stacks built from a VaeConfig. Inference only: frozen parameters, no gradients recorded.
//
//   auto encoder = std::make_shared<vae::VaeEncoder>(config);   // conv_in, down.i, mid, norm_out, conv_out
//   Tensor moments = encoder->forward(images);                  // [B, 3, H, W] -> [B, 2z, H/8, W/8]
//   auto decoder = std::make_shared<vae::VaeDecoder>(config);   // conv_in, mid, up.i, norm_out, conv_out
//   Tensor images = decoder->forward(z);                        // [B, z, h, w] -> [B, 3, 8h, 8w]
//
// Names: encoder.down.i.block.j.{norm1, conv1, norm2, conv2, nin_shortcut (when the channels change)},
// encoder.down.i.downsample.conv (all levels but the last), {encoder, decoder}.mid.{block_1, attn_1.{norm,
// q, k, v, proj_out}, block_2}, decoder.up.i.block.j, decoder.up.i.upsample.conv (all levels but 0; the
// decoder runs up.(n-1) first), {encoder, decoder}.{conv_in, norm_out, conv_out}. The q / k / v /
// proj_out projections are 1x1 convolutions [C, C, 1, 1] as in LDM (diffusers' Linear [C, C] is
// reshaped when loading: models/vae/vae_weights.h).
#pragma once

#include <memory>
#include <string>

#include "engine/module.h"
#include "models/vae/vae_config.h"

namespace wick::vae {

// x + conv2(silu(norm2(conv1(silu(norm1(x)))))), x through the 1x1 nin_shortcut when in != out.
// Children norm1, conv1, norm2, conv2 (3x3, padding 1) [, nin_shortcut].
class VaeResnetBlock : public Module {
 public:
  VaeResnetBlock(const VaeConfig& config, int64_t in_channels, int64_t out_channels);
  std::string type_name() const override { return "VaeResnetBlock"; }
  Tensor forward(const Tensor& x) override;
};

// x + proj_out(softmax(q^T k / sqrt(C)) over the h·w positions, applied to v), with q, k, v 1x1
// convolutions of norm(x): one head as wide as the channels. Children norm, q, k, v, proj_out.
class VaeAttnBlock : public Module {
 public:
  VaeAttnBlock(const VaeConfig& config, int64_t channels);
  std::string type_name() const override { return "VaeAttnBlock"; }
  Tensor forward(const Tensor& x) override;

 private:
  int64_t query_chunk_;
};

// q, k, v [B, C, h, w] -> [B, C, h, w]: single-head attention over the h·w positions, computed in
// chunks of `query_chunk` query positions (0: as many as keep one chunk's f32 scores within 64 MiB),
// in f32 for 16-bit inputs; the result has q's dtype. No score matrix larger than a chunk's exists.
Tensor spatial_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t query_chunk = 0);
// The query rows spatial_attention takes at a time for `batch` images of n_positions positions.
int64_t attention_chunk_rows(int64_t batch, int64_t n_positions, int64_t query_chunk, DType math_dtype);

// pad (0, 1, 0, 1) with zeros, then conv (3x3, stride 2, no padding): [B, C, H, W] -> [B, C, H/2, W/2].
class VaeDownsample : public Module {
 public:
  VaeDownsample(const VaeConfig& config, int64_t channels);
  std::string type_name() const override { return "VaeDownsample"; }
  Tensor forward(const Tensor& x) override;
};

// nearest x2 (each pixel repeated 2 x 2), then conv (3x3, padding 1).
class VaeUpsample : public Module {
 public:
  VaeUpsample(const VaeConfig& config, int64_t channels);
  std::string type_name() const override { return "VaeUpsample"; }
  Tensor forward(const Tensor& x) override;
};

// [B, C, H, W] -> [B, C, 2H, 2W], each pixel repeated 2 x 2 (torch's interpolate, mode nearest, scale 2).
Tensor upsample_nearest2x(const Tensor& x);

// FLUX.2's latent BatchNorm2d(latent_patch² · z_channels, affine = False) as its files hold it: parameters
// running_mean and running_var [latent_patch² · z_channels], f32 whatever config.dtype (the statistics keep their
// precision), on config.device, frozen; zeros and ones when config.initialize. No forward: the statistics are the
// per-channel latent normalization of open_flux2_image_vae (models/vae/flux2_vae.h).
class VaeLatentBatchNorm : public Module {
 public:
  explicit VaeLatentBatchNorm(const VaeConfig& config);
  std::string type_name() const override { return "VaeLatentBatchNorm"; }

 private:
  Tensor running_mean_, running_var_;
};

class VaeEncoder : public Module {
 public:
  explicit VaeEncoder(const VaeConfig& config);
  std::string type_name() const override { return "VaeEncoder"; }
  // images [B, in_channels, H, W] in config.dtype -> moments [B, 2 z_channels, H / f, W / f]
  // (f = config.downscale(); floor division), before quant_conv.
  Tensor forward(const Tensor& images) override;
};

class VaeDecoder : public Module {
 public:
  explicit VaeDecoder(const VaeConfig& config);
  std::string type_name() const override { return "VaeDecoder"; }
  // z [B, z_channels, h, w] (after post_quant_conv) -> images [B, out_channels, h·f, w·f].
  Tensor forward(const Tensor& z) override;
};

}  // namespace wick::vae
