// Scaled dot-product attention, forward: softmax(q k^T * scale + mask) v, plus the per-row
// logsumexp that the backward pass needs.
//
//   AttentionResult r = scaled_dot_product_attention(q, k, v);                 // q [B, H, Lq, D]
//   AttentionResult c = scaled_dot_product_attention(q, k, v, {}, std::nullopt, /*is_causal=*/true);
//   std::string path = attention_backend_name(q, k, v);                        // "cudnn", ...
//
// Which path runs: CPU tensors -> "cpu" (OpenBLAS per (batch, head, block of 64 query rows), f32
// or f64 math). CUDA tensors -> "cudnn" (cuDNN frontend SDPA graph, cached per shape) when wick
// has the cuDNN frontend, q/k/v are bf16/f16, there is no mask (causal is fine), D and Dv are
// multiples of 8 up to 128 and Lq, Lk >= 1; otherwise, or if cuDNN rejects the graph, "cuda_kernel"
// (a flash-style kernel with online softmax, f32 math (f64 for f64), D and Dv up to 256).
#pragma once

#include <optional>
#include <string>

#include "runtime/tensor.h"

namespace wick {

struct AttentionResult {
  Tensor out;        // [B, H, Lq, Dv] in q's dtype
  // [B, H, Lq] f32 (f64 when q is f64): natural log of sum_j exp(scale * q.k_j + mask_j) over kept keys.
  Tensor logsumexp;
};

// q [B, H, Lq, D], k [B, H, Lk, D], v [B, H, Lk, Dv], one floating dtype, one device, any strides.
// mask (optional) broadcasts to [B, H, Lq, Lk]: U8 (nonzero = keep) or floating (added to the
// scaled scores). scale defaults to 1/sqrt(D). is_causal keeps key j for query i only when j <= i
// (top-left aligned, as torch); it may be combined with a mask. A query row with no kept key gets
// out 0 (not NaN) and logsumexp -inf.
AttentionResult scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const Tensor& mask = Tensor(), std::optional<double> scale = std::nullopt,
                                             bool is_causal = false);

// The path scaled_dot_product_attention takes for these arguments: "cpu", "cudnn" or "cuda_kernel"
// ("cudnn" means it is tried first; a configuration cuDNN rejects at build time runs the kernel).
std::string attention_backend_name(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask = Tensor());

}  // namespace wick
