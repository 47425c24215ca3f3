// The layers of the Wan 2.1 causal 3-D VAE (Qwen-Image's VAE) with the original Wan parameter names,
// run on single frames (T = 1): the 3-D weights are kept whole, and each causal conv applies its last
// temporal tap as a 2-D conv (the earlier taps only ever see the causal zero padding of the first
// frame); time_conv is never applied to a first frame. Inference only: frozen, no gradients recorded.
//
//   auto encoder = std::make_shared<vae::WanEncoder>(config);   // conv1, downsamples.N, middle, head
//   Tensor moments = encoder->forward(frames);                  // [B, 3, H, W] -> [B, 2z, H/8, W/8]
//   auto decoder = std::make_shared<vae::WanDecoder>(config);   // conv1, middle, upsamples.N, head
//   Tensor frames = decoder->forward(z);                        // [B, z, h, w] -> [B, 3, 8h, 8w]
//
// Names (Wan's, as ComfyUI's qwen_image_vae.safetensors): {encoder, decoder}.conv1; residual blocks
// *.residual.{0 (RMS norm gamma), 2 (conv), 3 (gamma), 6 (conv)} [, *.shortcut (1x1x1 conv)];
// resamples *.resample.1 (2-D conv) [, *.time_conv (3x1x1 conv)]; encoder.downsamples.N and
// decoder.upsamples.N are flat lists of a level's residual blocks followed by its resample;
// middle.{0 (residual), 1 (attention: norm.gamma, to_qkv, proj), 2 (residual)}; head.{0 (gamma),
// 2 (conv)}. Causal convs hold [O, I, kt, k, k] weights, RMS norm gammas [C, 1, 1, 1] ([C, 1, 1] in
// the attention), the 2-D convs [O, I, k, k].
#pragma once

#include <memory>
#include <string>

#include "engine/module.h"
#include "models/vae/wan_vae_config.h"

namespace wick::vae {

// A causal 3-D convolution (zero padding 2·p in front along time, p on each side of H and W):
// weight [out, in, kt, k, k], bias [out]. For a single frame it is the 2-D convolution with the last
// temporal tap, weight[:, :, kt - 1], and spatial padding p.
class WanCausalConv3d : public Module {
 public:
  WanCausalConv3d(const WanVaeConfig& config, int64_t in, int64_t out, int64_t kernel_t, int64_t kernel_hw,
                  int64_t padding_hw);
  std::string type_name() const override { return "WanCausalConv3d"; }
  // One frame per image: x [B, in, H, W] -> [B, out, H', W'].
  Tensor forward(const Tensor& x) override;

  Tensor weight_, bias_;

 private:
  int64_t padding_;
};

// F.normalize over the channels (x / max(||x||_2, 1e-12), in f32 for 16-bit x) · sqrt(C) · gamma:
// Wan's RMS_norm, not an eps-RMSNorm. gamma [C, 1, 1, 1], or [C, 1, 1] when `image_gamma` (attention).
class WanRmsNorm : public Module {
 public:
  WanRmsNorm(const WanVaeConfig& config, int64_t channels, bool image_gamma = false);
  std::string type_name() const override { return "WanRmsNorm"; }
  Tensor forward(const Tensor& x) override;  // x [B, C, H, W]

  Tensor gamma_;
};

// shortcut(x) + conv(silu(norm(conv(silu(norm(x)))))): children residual.{0, 2, 3, 6} and shortcut
// (a 1x1x1 conv, when in != out).
class WanResidualBlock : public Module {
 public:
  WanResidualBlock(const WanVaeConfig& config, int64_t in, int64_t out);
  std::string type_name() const override { return "WanResidualBlock"; }
  Tensor forward(const Tensor& x) override;
};

// x + proj(attention(to_qkv(norm(x)))): one head as wide as the channels over the H·W positions of
// each frame (scale 1/sqrt(C)). Children norm, to_qkv (1x1, C -> 3C), proj (1x1).
class WanAttentionBlock : public Module {
 public:
  WanAttentionBlock(const WanVaeConfig& config, int64_t channels);
  std::string type_name() const override { return "WanAttentionBlock"; }
  Tensor forward(const Tensor& x) override;
};

enum class WanResampleMode { Downsample2d, Downsample3d, Upsample2d, Upsample3d };

// Down: pad (0, 1, 0, 1) with zeros, then resample.1 (3x3, stride 2): [B, C, H, W] -> [B, C, H/2, W/2].
// Up: nearest x2 (nearest-exact at scale 2), then resample.1 (3x3, padding 1, C -> C/2).
// The 3d modes also hold time_conv (3x1x1; down C -> C, up C -> 2C), unused on a first frame.
class WanResample : public Module {
 public:
  WanResample(const WanVaeConfig& config, int64_t channels, WanResampleMode mode);
  std::string type_name() const override { return "WanResample"; }
  Tensor forward(const Tensor& x) override;

 private:
  WanResampleMode mode_;
};

class WanEncoder : public Module {
 public:
  explicit WanEncoder(const WanVaeConfig& config);
  std::string type_name() const override { return "WanEncoder"; }
  // frames [B, in_channels, H, W] in config.dtype -> [B, 2 z_dim, H / f, W / f] (before the quant conv).
  Tensor forward(const Tensor& frames) override;
};

class WanDecoder : public Module {
 public:
  explicit WanDecoder(const WanVaeConfig& config);
  std::string type_name() const override { return "WanDecoder"; }
  // z [B, z_dim, h, w] (after the post-quant conv) -> [B, in_channels, h·f, w·f], not clamped.
  Tensor forward(const Tensor& z) override;
};

}  // namespace wick::vae
