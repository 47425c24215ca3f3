// Black Forest Labs' layers that Flux.1 and FLUX.2 share (their modules and parameter names): the per-head
// RMSNorm of q and k, the time / guidance embedder MLP, the modulation Linear, and the fused-qkv head split
// and joint attention with RoPE. models/flux/flux_blocks.h and models/flux2/flux2_blocks.h build on them.
//
//   register_module("norm", std::make_shared<nn::QKNorm>(head_dim, dtype, device));   // query_norm, key_norm
//   nn::HeadsQKV h = nn::split_heads(qkv, n_heads, *child("norm"));                   // [B, L, H, D] each
//   Tensor out = nn::joint_attention(q, k, v, rope);                                   // [B, L, H·D]
#pragma once

#include <string>
#include <vector>

#include "engine/module.h"
#include "models/nn/linear.h"
#include "runtime/ops/rope.h"

namespace wick::nn {

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

// BFL's LastLayer: children linear (hidden -> out) and adaLN_modulation (a Sequential whose "1" is
// Linear(hidden, 2·hidden); its "0" SiLU is not called: run takes SiLU(vec) already computed).
class LastLayer : public Module {
 public:
  LastLayer(int64_t hidden, int64_t out, const LinearOptions& options);
  std::string type_name() const override { return "LastLayer"; }
  // img [B, L_img, hidden] -> linear((1 + scale) · LayerNorm(img) + shift) [B, L_img, out], LayerNorm without
  // affine parameters (eps 1e-6), the modulation chunked (shift, scale).
  Tensor run(const Tensor& img, const Tensor& silu_vec);
};

}  // namespace wick::nn
