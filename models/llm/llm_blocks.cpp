#include "models/llm/llm_blocks.h"

#include <cmath>
#include <vector>

#include "engine/autograd/ops_attention.h"
#include "engine/autograd/ops_elementwise.h"
#include "engine/autograd/ops_layout.h"
#include "engine/autograd/ops_norm.h"
#include "engine/autograd/ops_rope.h"
#include "models/nn/linear.h"
#include "runtime/ops/creation.h"

namespace wick::llm {
namespace {

std::shared_ptr<nn::Linear> linear(int64_t in, int64_t out, bool bias, const LlmConfig& c) {
  return std::make_shared<nn::Linear>(
      in, out,
      nn::LinearOptions{.bias = bias, .dtype = c.dtype, .device = c.device, .trainable = false, .initialize = false});
}

}  // namespace

RotaryTables rotary_tables(int64_t length, int64_t head_dim, double theta, Device device) {
  WICK_CHECK(length >= 1 && head_dim >= 2 && head_dim % 2 == 0, "rotary_tables: length ", length, " and head_dim ",
             head_dim, " (even) must be positive");
  const int64_t half = head_dim / 2;
  std::vector<float> inverse(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    inverse[static_cast<size_t>(i)] = 1.0f / std::pow(static_cast<float>(theta), exponent);
  }
  std::vector<float> cos(static_cast<size_t>(length * half)), sin(cos.size());
  for (int64_t l = 0; l < length; ++l)
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(l) * inverse[static_cast<size_t>(i)];
      cos[static_cast<size_t>(l * half + i)] = std::cos(angle);
      sin[static_cast<size_t>(l * half + i)] = std::sin(angle);
    }
  return {Tensor::from_vector(cos, {length, half}).to(device), Tensor::from_vector(sin, {length, half}).to(device)};
}

Tensor apply_rotary_half_split(const Tensor& x, const RotaryTables& tables) {
  WICK_CHECK(x.dim() == 4 && x.size(3) % 2 == 0, "apply_rotary_half_split: x must be [B, H, L, D] with D even, got ",
             x.describe());
  const int64_t b = x.size(0), h = x.size(1), l = x.size(2), d = x.size(3);
  // [.., 2, D/2] -> [.., D/2, 2]: (x[i], x[i + D/2]) become the adjacent pair i that apply_rope rotates.
  Tensor pairs = autograd::transpose(autograd::reshape(x, {b, h, l, 2, d / 2}), 3, 4);
  Tensor interleaved = autograd::reshape(autograd::contiguous(pairs), {b, h, l, d});
  return autograd::apply_rope(interleaved, tables.cos, tables.sin);
}

LlmRMSNorm::LlmRMSNorm(int64_t dim, const LlmConfig& c) : eps_(c.eps) {
  register_parameter("weight", &weight_, ones({dim}, c.dtype, c.device), /*trainable=*/false);
}

Tensor LlmRMSNorm::forward(const Tensor& x) {
  Tensor normalized = autograd::rms_norm(autograd::to_dtype(x, DType::F32), Tensor(), eps_);
  return autograd::mul(weight_, autograd::to_dtype(normalized, weight_.dtype()));
}

LlmAttention::LlmAttention(const LlmConfig& c)
    : n_heads_(c.n_heads), n_kv_heads_(c.n_kv_heads), head_dim_(c.head_dim), qk_norm_(c.has_qk_norm()) {
  register_module("q_proj", linear(c.hidden_size, c.q_dim(), c.has_qkv_bias(), c));
  register_module("k_proj", linear(c.hidden_size, c.kv_dim(), c.has_qkv_bias(), c));
  register_module("v_proj", linear(c.hidden_size, c.kv_dim(), c.has_qkv_bias(), c));
  register_module("o_proj", linear(c.q_dim(), c.hidden_size, /*bias=*/false, c));
  if (qk_norm_) {
    register_module("q_norm", std::make_shared<LlmRMSNorm>(c.head_dim, c));
    register_module("k_norm", std::make_shared<LlmRMSNorm>(c.head_dim, c));
  }
}

Tensor LlmAttention::heads(const char* projection, const Tensor& h, int64_t n_heads) {
  return autograd::reshape(child(projection)->forward(h), {h.size(0), h.size(1), n_heads, head_dim_});
}

Tensor LlmAttention::run(const Tensor& h, const RotaryTables& rope, const Tensor& keep) {
  WICK_CHECK(h.dim() == 3, "LlmAttention: input must be [B, L, hidden], got ", h.describe());
  const int64_t batch = h.size(0), length = h.size(1);
  Tensor q = heads("q_proj", h, n_heads_), k = heads("k_proj", h, n_kv_heads_), v = heads("v_proj", h, n_kv_heads_);
  if (qk_norm_) {
    q = child("q_norm")->forward(q);
    k = child("k_norm")->forward(k);
  }
  q = apply_rotary_half_split(autograd::transpose(q, 1, 2), rope);  // [B, heads, L, head_dim]
  k = apply_rotary_half_split(autograd::transpose(k, 1, 2), rope);
  v = autograd::transpose(v, 1, 2);
  if (n_kv_heads_ != n_heads_) {  // grouped-query attention: each kv head serves n_heads / n_kv_heads queries
    const int64_t group = n_heads_ / n_kv_heads_;
    auto repeat = [&](const Tensor& t) {
      Tensor wide = autograd::expand(autograd::unsqueeze(t, 2), {batch, n_kv_heads_, group, length, head_dim_});
      return autograd::reshape(wide, {batch, n_heads_, length, head_dim_});
    };
    k = repeat(k);
    v = repeat(v);
  }
  Tensor attended = autograd::scaled_dot_product_attention(q, k, v, keep, std::nullopt, /*is_causal=*/true);
  return child("o_proj")->forward(
      autograd::reshape(autograd::transpose(attended, 1, 2), {batch, length, n_heads_ * head_dim_}));
}

LlmMLP::LlmMLP(const LlmConfig& c) {
  register_module("gate_proj", linear(c.hidden_size, c.intermediate_size, /*bias=*/false, c));
  register_module("up_proj", linear(c.hidden_size, c.intermediate_size, /*bias=*/false, c));
  register_module("down_proj", linear(c.intermediate_size, c.hidden_size, /*bias=*/false, c));
}

Tensor LlmMLP::forward(const Tensor& h) {
  Tensor gate = autograd::silu(child("gate_proj")->forward(h));
  return child("down_proj")->forward(autograd::mul(gate, child("up_proj")->forward(h)));
}

LlmDecoderLayer::LlmDecoderLayer(const LlmConfig& c) : dtype_(c.dtype) {
  register_module("self_attn", std::make_shared<LlmAttention>(c));
  register_module("mlp", std::make_shared<LlmMLP>(c));
  register_module("input_layernorm", std::make_shared<LlmRMSNorm>(c.hidden_size, c));
  register_module("post_attention_layernorm", std::make_shared<LlmRMSNorm>(c.hidden_size, c));
}

Tensor LlmDecoderLayer::run(const Tensor& x, const RotaryTables& rope, const Tensor& keep) {
  auto& attention = static_cast<LlmAttention&>(*child("self_attn"));
  Tensor h = child("input_layernorm")->forward(x);
  Tensor y = autograd::add(x, autograd::to_dtype(attention.run(h, rope, keep), DType::F32));
  h = child("post_attention_layernorm")->forward(y);
  return autograd::add(y, autograd::to_dtype(child("mlp")->forward(h), DType::F32));
}

}  // namespace wick::llm
