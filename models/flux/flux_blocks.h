// The layers of the Flux.1 transformer (Black Forest Labs' modules and parameter names), used by
// FluxTransformer (models/flux/flux.h); exposed for tests and for other models built like Flux.
//
//   DoubleStreamBlock block(config);                       // img_mod, img_attn, img_mlp, txt_*
//   auto [img2, txt2] = block.run(img, txt, silu_vec, rope);
//   SingleStreamBlock single(config);                      // linear1, linear2, norm, modulation
//   Tensor x2 = single.run(cat(txt, img), silu_vec, rope);
//
// Conventions shared by every block: tokens [B, L, hidden]; silu_vec = SiLU(vec) [B, hidden],
// computed once per forward and fed to every modulation Linear; rope = the cos/sin tables of the
// joint sequence (text first), [L_txt + L_img, 1, head_dim / 2] f32, built once per forward.
// Every projection is an nn::Linear looked up by name at call time, so LoRA/DoRA wrappers
// (nn::apply_adapters) on any of them take effect. Modulation chunks are in BFL's order:
// (shift, scale, gate) x 2 in double blocks, (shift, scale, gate) in single blocks and
// (shift, scale) in the final layer.
#pragma once

#include <utility>
#include <vector>

#include "engine/module.h"
#include "models/flux/flux_config.h"
#include "models/nn/linear.h"
#include "runtime/ops/rope.h"

namespace wick::flux {

// BFL's RMSNorm: y = x / sqrt(mean(x^2) + 1e-6) * scale over the last axis, statistics in f32.
// Parameter: scale [dim] (ones at construction).
class ScaledRMSNorm : public Module {
 public:
  ScaledRMSNorm(int64_t dim, DType dtype, Device device);
  std::string type_name() const override { return "ScaledRMSNorm"; }
  Tensor forward(const Tensor& x) override;
  Tensor scale_;
};

// Children query_norm and key_norm (ScaledRMSNorm over the head width).
class QKNorm : public Module {
 public:
  QKNorm(int64_t head_dim, DType dtype, Device device);
  std::string type_name() const override { return "QKNorm"; }
};

// in_layer -> SiLU -> out_layer (time_in, guidance_in, vector_in; FLUX.2's without biases).
class MLPEmbedder : public Module {
 public:
  MLPEmbedder(int64_t in_dim, int64_t hidden, const nn::LinearOptions& options);
  std::string type_name() const override { return "MLPEmbedder"; }
  Tensor forward(const Tensor& x) override;
};

// Child lin: Linear(hidden, n·hidden). chunks(silu_vec) -> n views [B, hidden] of lin(silu_vec).
// Flux.1's blocks own theirs; FLUX.2 has three shared by all blocks (no biases).
class Modulation : public Module {
 public:
  Modulation(int64_t hidden, int64_t n, const nn::LinearOptions& options);
  std::string type_name() const override { return "Modulation"; }
  std::vector<Tensor> chunks(const Tensor& silu_vec);

 private:
  int64_t n_;
};

// q, k, v of one stream: [B, L, heads, head_dim] each; q and k already RMS-normalized.
struct HeadsQKV {
  Tensor q, k, v;
};

// Splits a fused projection [B, L, 3·heads·head_dim] laid out (3, heads, head_dim) into heads
// (views) and applies query_norm / key_norm of `norm` (a QKNorm) to q and k.
HeadsQKV split_heads(const Tensor& qkv, int64_t n_heads, Module& norm);

// RoPE on q and k (adjacent pairs, tables [L, 1, head_dim/2]), then softmax(q k^T / sqrt(head_dim)) v
// with no mask. q, k, v [B, L, heads, head_dim] -> [B, L, heads·head_dim].
Tensor joint_attention(const Tensor& q, const Tensor& k, const Tensor& v, const RopeTables& rope);

// Children qkv (hidden -> 3·hidden, bias = qkv_bias), norm (QKNorm), proj (hidden -> hidden). The
// double block drives them; there is no standalone forward (the streams attend jointly).
class SelfAttention : public Module {
 public:
  explicit SelfAttention(const FluxConfig& config);
  std::string type_name() const override { return "SelfAttention"; }
};

class DoubleStreamBlock : public Module {
 public:
  explicit DoubleStreamBlock(const FluxConfig& config);
  std::string type_name() const override { return "DoubleStreamBlock"; }
  // img [B, L_img, hidden], txt [B, L_txt, hidden] -> (img, txt) after joint attention over
  // [txt; img] and each stream's MLP, every branch gated.
  std::pair<Tensor, Tensor> run(const Tensor& img, const Tensor& txt, const Tensor& silu_vec, const RopeTables& rope);

 private:
  int64_t n_heads_;
};

class SingleStreamBlock : public Module {
 public:
  explicit SingleStreamBlock(const FluxConfig& config);
  std::string type_name() const override { return "SingleStreamBlock"; }
  // x [B, L_txt + L_img, hidden] -> x + gate · linear2([attention; GELU_tanh(mlp)]).
  Tensor run(const Tensor& x, const Tensor& silu_vec, const RopeTables& rope);

 private:
  int64_t n_heads_, hidden_, mlp_hidden_;
};

// Children linear (hidden -> in_channels) and adaLN_modulation (a Sequential whose "1" is
// Linear(hidden, 2·hidden); its "0" SiLU is not called: run takes SiLU(vec) already computed).
class LastLayer : public Module {
 public:
  explicit LastLayer(const FluxConfig& config);
  std::string type_name() const override { return "LastLayer"; }
  // img [B, L_img, hidden] -> linear((1 + scale) · LayerNorm(img) + shift) [B, L_img, in_channels].
  Tensor run(const Tensor& img, const Tensor& silu_vec);
};

}  // namespace wick::flux
