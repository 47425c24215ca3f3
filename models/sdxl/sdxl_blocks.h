// The layers of the SDXL UNet with sgm's module and parameter names (openaimodel.py, attention.py), used by
// sdxl::Unet (models/sdxl/sdxl_unet.h); exposed for tests.
//
//   ResBlock res(config, 320, 640);                    // in_layers, emb_layers, out_layers, skip_connection
//   Tensor h = res.run(x, silu_emb);                   // [B, 320, H, W] -> [B, 640, H, W]
//   SpatialTransformer st(config, 640, /*depth=*/2);   // norm, proj_in, transformer_blocks.K, proj_out
//   h = st.run(h, context);                            // [B, 640, H, W], context [B, L, context_dim]
//
// Conventions: feature maps [B, C, H, W] and tokens [B, H·W, C] in the compute dtype; silu_emb = SiLU(time + added
// embedding) [B, time_embed_dim], computed once per forward and fed to every resnet's emb_layers.1 (the Sequential's
// "0" SiLU is not called). Every Linear and Conv2d is looked up by name at call time, so LoRA/LoCon/DoRA wrappers
// (nn::apply_adapters) on any of them take effect. GroupNorms compute their statistics and affine in f32 and round
// once (sgm's GroupNorm32 in the resnets and the output head; the transformers' GroupNorm has eps 1e-6, the others
// 1e-5); LayerNorms eps 1e-5; attention 1/sqrt(head width), no mask; GEGLU with the exact GELU.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/module.h"
#include "models/sdxl/sdxl_config.h"

namespace wick::sdxl {

// in_layers = [GroupNorm, SiLU, Conv2d 3x3], emb_layers = [SiLU, Linear(time_embed_dim, out)], out_layers =
// [GroupNorm, SiLU, Dropout, Conv2d 3x3], skip_connection = Conv2d 1x1 when in != out.
class ResBlock : public Module {
 public:
  ResBlock(const UnetConfig& config, int64_t in_channels, int64_t out_channels);
  std::string type_name() const override { return "ResBlock"; }
  // skip(x) + conv2(SiLU(GN(conv1(SiLU(GN(x))) + emb_layers.1(silu_emb)[:, :, None, None]))).
  Tensor run(const Tensor& x, const Tensor& silu_emb);

 private:
  int64_t groups_;
};

// to_q, to_k, to_v (no bias), to_out.0 (bias): softmax(q kᵀ / sqrt(width)) v over `heads` heads.
class CrossAttention : public Module {
 public:
  CrossAttention(const UnetConfig& config, int64_t channels, int64_t context_dim);
  std::string type_name() const override { return "CrossAttention"; }
  // x [B, L, C], context [B, L_ctx, context_dim] (undefined: self-attention over x) -> [B, L, C].
  Tensor run(const Tensor& x, const Tensor& context);

 private:
  int64_t heads_;
};

// norm1, attn1 (self), norm2, attn2 (cross), norm3, ff (net.0.proj: C -> 8C, GEGLU; net.2: 4C -> C).
class BasicTransformerBlock : public Module {
 public:
  BasicTransformerBlock(const UnetConfig& config, int64_t channels);
  std::string type_name() const override { return "BasicTransformerBlock"; }
  // x [B, L, C] -> x + attn1(LN1 x), + attn2(LN2 x, context), + ff(LN3 x).
  Tensor run(const Tensor& x, const Tensor& context);
};

// norm (GroupNorm eps 1e-6), proj_in, transformer_blocks.K, proj_out: Linear (SDXL) or 1x1 Conv2d (SD 1.x).
class SpatialTransformer : public Module {
 public:
  SpatialTransformer(const UnetConfig& config, int64_t channels, int64_t depth);
  std::string type_name() const override { return "SpatialTransformer"; }
  // x [B, C, H, W] -> x + proj_out(blocks(proj_in(GN(x)) as [B, H·W, C])) back to [B, C, H, W].
  Tensor run(const Tensor& x, const Tensor& context);
  int64_t depth() const { return depth_; }

 private:
  int64_t groups_, depth_;
  bool linear_;
};

// op = Conv2d 3x3, stride 2, padding 1.
class Downsample : public Module {
 public:
  Downsample(const UnetConfig& config, int64_t channels);
  std::string type_name() const override { return "Downsample"; }
  Tensor forward(const Tensor& x) override;
};

// nearest x2, then conv (3x3, padding 1).
class Upsample : public Module {
 public:
  Upsample(const UnetConfig& config, int64_t channels);
  std::string type_name() const override { return "Upsample"; }
  Tensor forward(const Tensor& x) override;
};

}  // namespace wick::sdxl
