#include "models/nn/attention.h"

#include "engine/autograd/ops_attention.h"
#include "engine/autograd/ops_join.h"
#include "engine/autograd/ops_layout.h"

namespace wick::nn {

MultiHeadAttention::MultiHeadAttention(int64_t dim, int64_t n_heads, AttentionOptions options)
    : dim_(dim), n_heads_(n_heads), options_(options) {
  WICK_CHECK(n_heads > 0 && dim % n_heads == 0, "MultiHeadAttention: dim ", dim, " is not divisible by ", n_heads,
             " heads");
  head_dim_ = dim / n_heads;
  LinearOptions linear = options.linear;
  linear.bias = options.bias;
  if (options.context_dim == 0) {
    register_module("qkv", std::make_shared<Linear>(dim, 3 * dim, linear));
  } else {
    register_module("q", std::make_shared<Linear>(dim, dim, linear));
    register_module("kv", std::make_shared<Linear>(options.context_dim, 2 * dim, linear));
  }
  if (options.qk_norm) {
    register_module("q_norm", std::make_shared<RMSNorm>(head_dim_, 1e-6, true, linear.dtype, linear.device));
    register_module("k_norm", std::make_shared<RMSNorm>(head_dim_, 1e-6, true, linear.dtype, linear.device));
  }
  register_module("proj", std::make_shared<Linear>(dim, dim, linear));
}

Tensor MultiHeadAttention::split_heads(const Tensor& t) const {
  return autograd::transpose(autograd::reshape(t, {t.size(0), t.size(1), n_heads_, head_dim_}), 1, 2);
}

Tensor MultiHeadAttention::forward(const Tensor& x) { return attend(x); }

Tensor MultiHeadAttention::attend(const Tensor& x, const Tensor& context, const Tensor& mask) {
  WICK_CHECK(x.dim() == 3 && x.size(2) == dim_, "MultiHeadAttention: input ", x.describe(), " is not [B, L, ", dim_,
             "]");
  Tensor q, k, v;
  if (options_.context_dim == 0) {
    WICK_CHECK(!context.defined(), "MultiHeadAttention: a self-attention module got a context");
    std::vector<Tensor> parts = autograd::chunk(child("qkv")->forward(x), 3, -1);
    q = parts[0], k = parts[1], v = parts[2];
  } else {
    WICK_CHECK(context.defined(), "MultiHeadAttention: a cross-attention module needs a context");
    q = child("q")->forward(x);
    std::vector<Tensor> parts = autograd::chunk(child("kv")->forward(context), 2, -1);
    k = parts[0], v = parts[1];
  }
  q = split_heads(q), k = split_heads(k), v = split_heads(v);
  if (options_.qk_norm) {
    q = child("q_norm")->forward(q);
    k = child("k_norm")->forward(k);
  }
  Tensor attended = autograd::scaled_dot_product_attention(q, k, v, mask);     // [B, heads, Lq, head_dim]
  Tensor merged = autograd::reshape(autograd::transpose(attended, 1, 2), {x.size(0), x.size(1), dim_});
  return child("proj")->forward(merged);
}

}  // namespace wick::nn
