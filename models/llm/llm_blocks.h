// The layers of the decoder-only language models in models/llm (Qwen3, Qwen2, Mistral), with transformers'
// module names, used by LlmEncoder (models/llm/llm_encoder.h); exposed for tests.
//
//   LlmDecoderLayer layer(config);                                      // self_attn, mlp, two layernorms
//   RotaryTables rope = rotary_tables(L, config.head_dim, config.rope_theta, config.device);
//   Tensor keep = ...;                                                  // [B, 1, 1, L] U8, nonzero = real token
//   Tensor x2 = layer.run(x, rope, keep);                               // x [B, L, hidden] f32 residual stream
//
// Precision: the residual stream is f32 whatever config.dtype is. Each RMSNorm computes its statistics in f32
// and returns weight * normalized.to(dtype) in the weight's dtype, as transformers (Qwen3RMSNorm / Qwen2RMSNorm /
// MistralRMSNorm); matmuls and attention run in config.dtype with f32 accumulation, and each sub-layer's output
// is added to the residual in f32 (transformers' bf16 model keeps the residual itself in bf16).
// RoPE is the half-split (rotate_half) form: pair i of a head is (x[i], x[i + head_dim/2]), angle
// position * theta^(-2i / head_dim), computed in f32 as transformers' default rotary embedding. Attention is
// causal, keys of padding tokens are dropped, scores are scaled by 1/sqrt(head_dim); a query with no key left (a
// left-padding row) gets 0, as torch's SDPA. Dropout is not applied (inference). Parameters are allocated
// uninitialized (weights are loaded next) and frozen; norm weights start at 1.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/module.h"
#include "models/llm/llm_config.h"

namespace wick::llm {

// cos / sin [L, head_dim / 2] f32 of positions 0 .. L - 1: angle(l, i) = l * (1 / theta^(2i / head_dim)), each
// step in f32 as torch (inv_freq = 1.0 / base ** (arange(0, D, 2) / D), freqs = position * inv_freq).
struct RotaryTables {
  Tensor cos, sin;
};
RotaryTables rotary_tables(int64_t length, int64_t head_dim, double theta, Device device);

// x [B, H, L, D] -> rotate_half RoPE applied, [B, H, L, D] in x's dtype, with the head dimension permuted to
// interleaved pairs (x[i], x[i + D/2]) -> positions 2i, 2i + 1. Queries and keys both come out in that order, so
// q . k is unchanged by the permutation; only RoPE-rotated queries and keys may go through it.
Tensor apply_rotary_half_split(const Tensor& x, const RotaryTables& tables);

// RMSNorm over the last axis: weight * (x / sqrt(mean(x^2) + eps)).to(weight dtype), statistics in f32.
// Parameter: weight [dim] in config.dtype.
class LlmRMSNorm : public Module {
 public:
  LlmRMSNorm(int64_t dim, const LlmConfig& config);
  std::string type_name() const override { return "LlmRMSNorm"; }
  // x [..., dim] any floating dtype -> [..., dim] in the weight's dtype.
  Tensor forward(const Tensor& x) override;
  Tensor weight_;

 private:
  double eps_;
};

// Children q_proj (hidden -> heads x head_dim), k_proj, v_proj (hidden -> kv_heads x head_dim; with biases for
// Qwen2), o_proj (back, no bias), q_norm / k_norm (Qwen3: LlmRMSNorm over head_dim, per head, before RoPE).
class LlmAttention : public Module {
 public:
  explicit LlmAttention(const LlmConfig& config);
  std::string type_name() const override { return "LlmAttention"; }
  // h [B, L, hidden] in the compute dtype; keep [B, 1, 1, L] U8 (nonzero = the key is a real token) or undefined
  // (every key kept); causal always -> [B, L, hidden] in h's dtype.
  Tensor run(const Tensor& h, const RotaryTables& rope, const Tensor& keep);

 private:
  Tensor heads(const char* projection, const Tensor& h, int64_t n_heads);  // -> [B, L, heads, head_dim]
  int64_t n_heads_, n_kv_heads_, head_dim_;
  bool qk_norm_;
};

// Children gate_proj, up_proj (hidden -> intermediate), down_proj (back), no biases: down(silu(gate h) * up h).
class LlmMLP : public Module {
 public:
  explicit LlmMLP(const LlmConfig& config);
  std::string type_name() const override { return "LlmMLP"; }
  Tensor forward(const Tensor& h) override;
};

// One pre-norm decoder layer: children self_attn, mlp, input_layernorm, post_attention_layernorm.
class LlmDecoderLayer : public Module {
 public:
  explicit LlmDecoderLayer(const LlmConfig& config);
  std::string type_name() const override { return "LlmDecoderLayer"; }
  // x [B, L, hidden] f32 -> x + attention(norm(x)), then + mlp(norm(.)), f32; rope and keep as LlmAttention::run.
  Tensor run(const Tensor& x, const RotaryTables& rope, const Tensor& keep);

 private:
  DType dtype_;
};

}  // namespace wick::llm
