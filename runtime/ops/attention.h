// Scaled dot-product attention, forward: softmax(q k^T * scale + mask) v, plus the per-row
// logsumexp that the backward pass needs; and backward: the gradients of q, k, v given the gradient
// of the output, from the forward's out and logsumexp instead of a stored probability matrix.
//
//   AttentionResult r = scaled_dot_product_attention(q, k, v);                 // q [B, H, Lq, D]
//   AttentionResult c = scaled_dot_product_attention(q, k, v, {}, std::nullopt, /*is_causal=*/true);
//   std::string path = attention_backend_name(q, k, v);                        // "cudnn", ...
//   AttentionGrads g = scaled_dot_product_attention_backward(grad_out, q, k, v, r.out, r.logsumexp, mask, scale,
//                                                            causal);                    // g.grad_q ...
//   std::string back = attention_backward_backend_name(q, k, v, mask);                  // "cudnn", ...
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

// ---- gradients ----
// Math (flash-attention backward, f32 accumulation; f64 for f64): with S = scale * q k^T + mask
// (causal / dropped keys at -inf), P = exp(S - logsumexp), D_i = sum_e dO_ie O_ie:
//   dV = P^T dO,  dP = dO V^T,  dS = P * (dP - D),  dQ = scale * dS K,  dK = scale * dS^T Q.
// The mask is a constant: no gradient flows to it (an additive float mask would have dMask = dS
// summed over its broadcast axes; wick does not compute it). Rows with no kept key (logsumexp
// -inf) contribute nothing: their grad_q rows are 0 and they add nothing to grad_k / grad_v.
//
// Which path runs: CPU -> "cpu" (OpenBLAS per (batch, head), blocks of 64 query rows, parallel over
// (batch, head)). CUDA -> "cudnn" (cuDNN frontend sdpa_backward graph, cached per shape) under the
// same conditions as the forward's cuDNN path (bf16/f16, no mask, D and Dv multiples of 8 up to 128),
// else "cuda_kernel": two deterministic kernels without atomics (dQ per block of query rows, then
// dK/dV per block of key rows; each recomputes P from q, k and logsumexp), D and Dv up to 256.
// Both CUDA paths read the same logsumexp convention (natural log of the scaled, masked scores, f32,
// [B, H, Lq]), so a forward on one path may be followed by a backward on the other.
//
// Memory: the forward saves out [B, H, Lq, Dv] (q's dtype) and logsumexp [B, H, Lq] (f32) per call,
// O(L) instead of the O(Lq * Lk) probabilities; the backward recomputes S and P tile by tile (one
// extra q k^T product, the usual flash trade). At Flux shapes (24 heads x 128 dim, 4608 tokens,
// bf16, batch 1) that is 27 MiB (out) + 0.4 MiB (lse) per call versus 972 MiB for P in bf16.
// Benchmark to add later on the GPU: forward + backward against torch's
// scaled_dot_product_attention (cuDNN / flash backends) at B=1, H=24, L=4608, D=128, bf16, with and
// without causal; report ms and TFLOP/s (4 * B * H * L^2 * D forward, 2.5x that backward).
struct AttentionGrads {
  Tensor grad_q;  // [B, H, Lq, D] in q's dtype
  Tensor grad_k;  // [B, H, Lk, D] in k's dtype
  Tensor grad_v;  // [B, H, Lk, Dv] in v's dtype
};

// grad_out and out [B, H, Lq, Dv] (any floating dtype; any strides), logsumexp [B, H, Lq] as the
// forward returned it (any floating dtype), q/k/v/mask/scale/is_causal as given to the forward
// (same contract as scaled_dot_product_attention). All tensors on one device.
AttentionGrads scaled_dot_product_attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k,
                                                     const Tensor& v, const Tensor& out, const Tensor& logsumexp,
                                                     const Tensor& mask = Tensor(),
                                                     std::optional<double> scale = std::nullopt,
                                                     bool is_causal = false);

// The path scaled_dot_product_attention_backward takes: "cpu", "cudnn" or "cuda_kernel" ("cudnn"
// means it is tried first; a configuration cuDNN rejects at build time runs the kernel).
std::string attention_backward_backend_name(const Tensor& q, const Tensor& k, const Tensor& v,
                                            const Tensor& mask = Tensor());

}  // namespace wick
