// The layers of the Z-Image transformer (the authors' modules and diffusers' parameter names), used
// by ZImageTransformer (models/zimage/zimage.h); exposed for tests.
//
//   ZImageBlock block(config, /*modulated=*/true);          // a main layer or a noise-refiner block
//   Tensor y = block.run(x, adaln, rope, mask);              // x [B, L, dim], adaln [B, min(dim, 256)]
//   ZImageBlock context(config, /*modulated=*/false);        // a context-refiner block: no adaLN
//   Tensor c = context.run(caption_tokens, Tensor(), rope, mask);
//
// Conventions: tokens [B, L, dim]; adaln = t_embedder's output c (no SiLU: the blocks' adaLN Linear
// reads c as it is; only the final layer applies SiLU); rope = cos/sin tables [B, L, 1, head_dim/2]
// f32 (each sample its own positions); mask = U8 [B, 1, 1, L] (1 = a key to attend to) or undefined
// when no sample of the batch is padded. Every projection is an nn::Linear looked up by name at call
// time, so LoRA/DoRA wrappers (nn::apply_adapters) on any of them take effect.
#pragma once

#include "engine/module.h"
#include "models/zimage/zimage_config.h"
#include "runtime/ops/rope.h"

namespace wick::zimage {

// Children to_q, to_k, to_v, to_out ("0": the output Linear), all bias-free, and norm_q / norm_k
// (RMSNorm over the head width, eps 1e-5, with weight).
class ZImageAttention : public Module {
 public:
  explicit ZImageAttention(const ZImageConfig& config);
  std::string type_name() const override { return "ZImageAttention"; }
  // x [B, L, dim] -> to_out(softmax(rope(norm_q(q)) rope(norm_k(k))^T / sqrt(head_dim) + mask) v).
  Tensor run(const Tensor& x, const RopeTables& rope, const Tensor& mask);

 private:
  int64_t n_heads_;
};

// w2(SiLU(w1 x) · w3 x), bias-free.
class FeedForward : public Module {
 public:
  explicit FeedForward(const ZImageConfig& config);
  std::string type_name() const override { return "FeedForward"; }
  Tensor forward(const Tensor& x) override;
};

// Children attention, feed_forward, attention_norm1/2, ffn_norm1/2 (RMSNorm, norm_eps) and, when
// modulated, adaLN_modulation ("0": Linear(min(dim, 256) -> 4·dim), chunks scale_msa, gate_msa,
// scale_mlp, gate_mlp). Modulated:
//   x += tanh(gate_msa) · attention_norm2(attention(attention_norm1(x) · (1 + scale_msa)))
//   x += tanh(gate_mlp) · ffn_norm2(feed_forward(ffn_norm1(x) · (1 + scale_mlp)))
// Unmodulated: the same without scales and gates.
class ZImageBlock : public Module {
 public:
  ZImageBlock(const ZImageConfig& config, bool modulated);
  std::string type_name() const override { return "ZImageBlock"; }
  bool modulated() const { return modulated_; }
  // x [B, L, dim]; adaln [B, min(dim, 256)] (modulated) or undefined (unmodulated) -> [B, L, dim].
  Tensor run(const Tensor& x, const Tensor& adaln, const RopeTables& rope, const Tensor& mask);

 private:
  bool modulated_;
};

// Children linear (dim -> patch features) and adaLN_modulation (a Sequential: "0" SiLU, "1"
// Linear(min(dim, 256) -> dim)).
class FinalLayer : public Module {
 public:
  explicit FinalLayer(const ZImageConfig& config);
  std::string type_name() const override { return "FinalLayer"; }
  // x [B, L, dim], adaln [B, min(dim, 256)] -> linear(LayerNorm(x) · (1 + adaLN_modulation(adaln)))
  // with LayerNorm without affine parameters, eps 1e-6.
  Tensor run(const Tensor& x, const Tensor& adaln);
};

// Child mlp (a Sequential: "0" Linear(256 -> t_hidden), "1" SiLU, "2" Linear(t_hidden -> min(dim, 256))).
// forward: sinusoidal features [B, 256] (cos first) -> c [B, min(dim, 256)].
class TimestepEmbedder : public Module {
 public:
  explicit TimestepEmbedder(const ZImageConfig& config);
  std::string type_name() const override { return "TimestepEmbedder"; }
  Tensor forward(const Tensor& features) override;
};

}  // namespace wick::zimage
