// Multi-head self- or cross-attention on the runtime's fused SDPA.
//
//   auto attn = std::make_shared<nn::MultiHeadAttention>(/*dim=*/512, /*heads=*/8);
//   Tensor y = attn->forward(x);                        // x [B, L, 512] self-attention
//   Tensor z = attn->attend(x, context, mask);          // queries from x, keys/values from context
//
// Children: qkv (dim -> 3·dim) for self-attention, q / kv (dim -> dim, context_dim -> 2·dim) when a
// context width is given, and proj (dim -> dim). Optional per-head RMS norms on q and k
// (qk_norm, as Flux and SD3.5 use).
#pragma once

#include <memory>

#include "engine/module.h"
#include "models/nn/linear.h"
#include "models/nn/norm.h"

namespace wick::nn {

struct AttentionOptions {
  int64_t context_dim = 0;  // 0: self-attention (one qkv projection)
  bool qk_norm = false;
  bool bias = true;
  LinearOptions linear;     // dtype/device/trainable of the projections (its bias field is ignored)
};

class MultiHeadAttention : public Module {
 public:
  MultiHeadAttention(int64_t dim, int64_t n_heads, AttentionOptions options = {});
  std::string type_name() const override { return "MultiHeadAttention"; }
  Tensor forward(const Tensor& x) override;  // self-attention
  // x [B, Lq, dim]; context [B, Lk, context_dim] (cross-attention modules) or undefined (self);
  // mask broadcastable to [B, heads, Lq, Lk] (U8 keep-mask or additive).
  Tensor attend(const Tensor& x, const Tensor& context = Tensor(), const Tensor& mask = Tensor());
  int64_t n_heads() const { return n_heads_; }

 private:
  Tensor split_heads(const Tensor& t) const;  // [B, L, dim] -> [B, heads, L, head_dim]
  int64_t dim_, n_heads_, head_dim_;
  AttentionOptions options_;
};

}  // namespace wick::nn
