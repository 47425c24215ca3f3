// The layers of the T5 v1.1 encoder, with transformers' module names, used by T5Encoder
// (models/t5/t5_encoder.h); exposed for tests.
//
//   T5Stack stack(config);                                  // "block.N", "final_layer_norm"
//   Tensor out = stack.run(embeddings_f32, padding);        // [B, L, d_model] in config.dtype
//   T5Block& block = stack.block(0);                        // layer.0 (self-attention), layer.1 (FFN)
//   Tensor bias = block.attention().position_bias(L);       // [1, heads, L, L] f32, block 0 only (umT5: every block)
//   Tensor x2 = block.run(x, bias);                         // x [B, L, d_model] f32 residual stream
//
// Precision: the residual stream is f32 whatever config.dtype is; each sub-layer normalizes it in f32
// (T5LayerNorm: no mean, no bias), casts the result to config.dtype, runs its matmuls and attention in that dtype
// (f32 accumulation) and adds its output back in f32. Attention is softmax(q k^T + bias) v: no 1/sqrt(d_kv)
// scaling (T5 folds it into the weights). The FFN is wo(GELU_tanh(wi_0 h) * wi_1 h). Dropout is not applied
// (inference). Parameters are allocated uninitialized (weights are loaded right after) and frozen.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/module.h"
#include "models/t5/t5_config.h"

namespace wick::t5 {

// transformers' T5Attention._relative_position_bucket(relative_position, bidirectional=True, n_buckets,
// max_distance), relative_position = key position - query position: half the buckets per direction (positive
// distances in the upper half), the first half of each exact, then logarithmic up to max_distance, clamped to
// the last bucket. Computed in f32 like torch.
int64_t relative_position_bucket(int64_t relative_position, int64_t n_buckets, int64_t max_distance);

// An embedding table `weight` [rows, dim] (shared, relative_attention_bias), uninitialized.
class T5Embedding : public Module {
 public:
  T5Embedding(int64_t rows, int64_t dim, const T5Config& config);
  std::string type_name() const override { return "T5Embedding"; }
  // ids (I32/I64, any shape) -> [*ids, dim] in the weight's dtype.
  Tensor forward(const Tensor& ids) override;
  Tensor weight_;
};

// T5LayerNorm (RMS norm): y = x / sqrt(mean(x^2) + eps) * weight over the last axis, statistics in f32; y has
// x's dtype. Parameter: weight [dim].
class T5LayerNorm : public Module {
 public:
  T5LayerNorm(int64_t dim, const T5Config& config);
  std::string type_name() const override { return "T5LayerNorm"; }
  Tensor forward(const Tensor& x) override;
  Tensor weight_;

 private:
  double eps_;
};

// Children q, k, v (d_model -> heads x d_kv), o (back), no biases; relative_attention_bias [n_buckets, heads]
// when has_relative_bias (block 0; every block in umT5).
class T5Attention : public Module {
 public:
  T5Attention(const T5Config& config, bool has_relative_bias);
  std::string type_name() const override { return "T5Attention"; }
  // h [B, L, d_model] in the compute dtype; bias [B or 1, heads, L, L] f32 (position bias plus the additive
  // padding mask) -> [B, L, d_model] in h's dtype.
  Tensor run(const Tensor& h, const Tensor& bias);
  // The relative-position bias of a length-L sequence, [1, heads, L, L] f32 on the model's device: row i,
  // column j = relative_attention_bias[bucket(j - i)]. Only in the block that has the table.
  Tensor position_bias(int64_t length);

 private:
  int64_t n_heads_, d_kv_, n_buckets_, max_distance_;
};

// Children wi_0, wi_1 (d_model -> d_ff), wo (d_ff -> d_model), no biases: wo(GELU_tanh(wi_0 h) * wi_1 h).
class T5DenseGatedActDense : public Module {
 public:
  explicit T5DenseGatedActDense(const T5Config& config);
  std::string type_name() const override { return "T5DenseGatedActDense"; }
  Tensor forward(const Tensor& h) override;
};

// One encoder block: children "layer" = {"0": SelfAttention + layer_norm, "1": DenseReluDense + layer_norm}.
class T5Block : public Module {
 public:
  T5Block(const T5Config& config, bool has_relative_bias);
  std::string type_name() const override { return "T5Block"; }
  // x [B, L, d_model] f32 -> x + attention(norm(x)), then + FFN(norm(.)), f32; bias as T5Attention::run.
  Tensor run(const Tensor& x, const Tensor& bias);
  T5Attention& attention();

 private:
  DType dtype_;
};

// transformers' T5Stack without its embedding: children "block" (T5Block 0 .. n_layers - 1; block 0 holds the
// relative_attention_bias table, whose bias every block reuses; with config.bias_per_block (umT5, transformers'
// UMT5Stack) every block holds one and uses its own) and "final_layer_norm".
class T5Stack : public Module {
 public:
  explicit T5Stack(const T5Config& config);
  std::string type_name() const override { return "T5Stack"; }
  // x [B, L, d_model] f32 (the embeddings); padding [B, 1, 1, L] f32, 0 for kept keys and the lowest f32 for
  // dropped ones, added to the position bias (undefined: every key attended) -> final_layer_norm(blocks(x))
  // [B, L, d_model] in config.dtype.
  Tensor run(const Tensor& x, const Tensor& padding);
  T5Block& block(int64_t index);
  int64_t n_blocks() const;

 private:
  DType dtype_;
  bool bias_per_block_;
};

}  // namespace wick::t5
