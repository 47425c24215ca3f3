// The layers of the SD3 / SD3.5 MMDiT with Stability AI's module and parameter names (mmditx.py), used
// by sd3::MMDiT (models/sd3/sd3.h); exposed for tests.
//
//   JointBlock block(config, /*index=*/0);          // context_block + x_block (DismantledBlock each)
//   auto [context2, x2] = block.run(context, x, silu_c);   // context2 undefined in the last block
//   FinalLayer final_layer(config);
//   Tensor patches = final_layer.run(x, silu_c);     // [B, L, p·p·C] ordered (p, q, c)
//
// Conventions shared by every block: tokens [B, L, hidden]; silu_c = SiLU(c) [B, hidden], c the
// timestep + pooled embedding, computed once per forward and fed to every adaLN_modulation.1 (the
// Sequential's "0" SiLU is not called). Every projection is an nn::Linear looked up by name at call
// time, so LoRA/DoRA wrappers (nn::apply_adapters) on any of them take effect. Modulation chunks are in
// SAI's order: (shift, scale, gate) for attention, then for the MLP, then for attn2 (9-way blocks);
// (shift, scale) in the pre-only context block and the final layer. LayerNorms have no affine
// parameters, eps 1e-6; QK RMSNorm eps 1e-6; the MLP is fc1 -> GELU (tanh) -> fc2.
#pragma once

#include <utility>
#include <vector>

#include "engine/module.h"
#include "models/sd3/sd3_config.h"

namespace wick::sd3 {

// SAI's RMSNorm with a learnable scale: y = x / sqrt(mean(x²) + 1e-6) · weight over the last axis,
// statistics in f32. Parameter: weight [dim] (ones at construction).
class RMSNorm : public Module {
 public:
  RMSNorm(int64_t dim, DType dtype, Device device);
  std::string type_name() const override { return "RMSNorm"; }
  Tensor forward(const Tensor& x) override;
  Tensor weight_;
};

// q, k, v of one stream: [B, L, heads, head_dim] each (views of the fused projection; q and k
// RMS-normalized per head when the model has QK norm).
struct HeadsQKV {
  Tensor q, k, v;
};

// softmax(q kᵀ / sqrt(head_dim)) v with no mask over q, k, v [B, L, heads, head_dim] (k, v may be
// longer than q) -> [B, L_q, heads · head_dim].
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v);

// Children qkv (hidden -> 3·hidden, bias), ln_q and ln_k (RMSNorm over the head width, with QK norm),
// proj (hidden -> hidden; absent in the pre-only context block).
class SelfAttention : public Module {
 public:
  SelfAttention(const Sd3Config& config, bool with_proj);
  std::string type_name() const override { return "SelfAttention"; }
  // x [B, L, hidden] (already modulated) -> q, k, v split (qkv's features are (3, heads, head_dim));
  // q is left undefined (and not normalized) when !with_q (the pre-only context stream is not queried).
  HeadsQKV pre_attention(const Tensor& x, bool with_q = true);
  // attended [B, L, hidden] -> proj(attended).
  Tensor post_attention(const Tensor& attended);

 private:
  int64_t n_heads_;
};

// fc1 (hidden -> mlp) -> GELU (tanh) -> fc2 (mlp -> hidden).
class Mlp : public Module {
 public:
  explicit Mlp(const Sd3Config& config);
  std::string type_name() const override { return "Mlp"; }
  Tensor forward(const Tensor& x) override;
};

// One stream of a joint block (SAI's DismantledBlock): adaLN_modulation, attn, attn2 (x_block of
// dual-attention blocks), mlp (absent when pre-only). Driven by JointBlock.
class DismantledBlock : public Module {
 public:
  DismantledBlock(const Sd3Config& config, bool pre_only, bool dual_attention);
  std::string type_name() const override { return "DismantledBlock"; }
  // The modulation chunks of adaLN_modulation.1(silu_c): 2 (pre-only), 6, or 9 (dual attention) views [B, hidden].
  std::vector<Tensor> modulation(const Tensor& silu_c);
  bool pre_only() const { return pre_only_; }
  bool dual_attention() const { return dual_; }

 private:
  bool pre_only_, dual_;
};

class JointBlock : public Module {
 public:
  // Block `index` of `config`: its context stream is pre-only when it is the last block, its x
  // stream has attn2 when config.dual_attention(index).
  JointBlock(const Sd3Config& config, int64_t index);
  std::string type_name() const override { return "JointBlock"; }
  // context [B, L_ctx, hidden], x [B, L_img, hidden] -> (context, x) after attention over
  // [context; x] (SAI's order), attn2 over x alone (dual-attention blocks: after the joint
  // attention's residual, before the MLP), and each stream's MLP, every branch gated. In the
  // pre-only block the returned context is undefined and only x's rows are queried.
  std::pair<Tensor, Tensor> run(const Tensor& context, const Tensor& x, const Tensor& silu_c);
  bool pre_only() const { return pre_only_; }

 private:
  bool pre_only_;
};

// Children linear (hidden -> p·p·out_channels) and adaLN_modulation (Sequential; "1" is
// Linear(hidden, 2·hidden) with chunks (shift, scale)).
class FinalLayer : public Module {
 public:
  explicit FinalLayer(const Sd3Config& config);
  std::string type_name() const override { return "FinalLayer"; }
  // x [B, L, hidden] -> linear((1 + scale) · LayerNorm(x) + shift) [B, L, p·p·out_channels].
  Tensor run(const Tensor& x, const Tensor& silu_c);
};

}  // namespace wick::sd3
