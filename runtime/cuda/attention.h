// CUDA launchers for runtime/ops/attention.h: a plain flash-style kernel (any floating dtype,
// strided q/k/v, optional mask) and the cuDNN frontend SDPA graph (bf16/f16, no mask); for the
// gradients two deterministic kernels (same inputs) and the cuDNN frontend sdpa_backward graph
// (bf16/f16, no mask). The cuDNN graphs are in attention_cudnn.cpp.
//
//   cuda::attention_forward(DType::BF16, q, k, v, nullptr, DType::U8, dims, causal, scale, out, lse, stream);
//   if (!cuda::attention_forward_cudnn(0, DType::BF16, q, k, v, dims, causal, scale, out, lse, stream)) ...
//   cuda::attention_backward(DType::BF16, grad_out, q, k, v, out, lse, nullptr, DType::U8, dims, causal, scale,
//                            row_dot, grad_q, grad_k, grad_v, stream);
//   if (!cuda::attention_backward_cudnn(0, DType::BF16, grad_out, q, k, v, out, lse, dims, causal, scale, grad_q,
//                                       grad_k, grad_v, stream)) ...
#pragma once

#include <cstdint>

#include "runtime/dtype.h"

namespace wick::cuda {

struct AttentionDims {
  int64_t batch = 0, heads = 0, n_queries = 0, n_keys = 0, head_dim = 0, value_dim = 0;
  // Element strides of q, k, v over [B, H, L, D] and of the mask over [B, H, Lq, Lk] (0 = broadcast).
  int64_t q_strides[4] = {}, k_strides[4] = {}, v_strides[4] = {}, mask_strides[4] = {};
  // Element strides of out over [B, H, Lq, Dv] for the cuDNN path (all 0: contiguous). The fallback
  // kernel always writes out contiguous.
  int64_t out_strides[4] = {};
};

// Largest head_dim / value_dim the fallback kernel takes (its tiles live in shared memory).
inline constexpr int64_t attention_kernel_max_head_dim = 256;

// Fallback kernel. q/k/v in `dtype` (F32/F64/BF16/F16) with dims' strides; mask nullable, U8
// (0 = drop) or additive in the accumulation type (f32, or f64 for F64). out [B, H, Lq, Dv]
// contiguous in dtype, logsumexp [B, H, Lq] in the accumulation type. Causal keeps key j <= query i. Rows with no
// kept key get out 0 and logsumexp -inf.
void attention_forward(DType dtype, const void* q, const void* k, const void* v, const void* mask, DType mask_dtype,
                       const AttentionDims& dims, bool causal, double scale, void* out, void* logsumexp,
                       void* stream);

// True when wick was built with the cuDNN frontend (WICK_HAS_CUDNN_FRONTEND).
bool cudnn_attention_compiled();
// cuDNN SDPA for BF16/F16 q/k/v (last stride 1, 16-byte aligned), no mask, optional top-left
// causal mask; out [B, H, Lq, Dv] with dims.out_strides (contiguous when those are 0), logsumexp [B, H, Lq] f32 (natural log). Graphs are
// built once per shape/stride/dtype/scale and cached. Returns false (having launched nothing) when
// cuDNN cannot run this configuration, so the caller can fall back to attention_forward.
bool attention_forward_cudnn(int device, DType dtype, const void* q, const void* k, const void* v,
                             const AttentionDims& dims, bool causal, float scale, void* out, float* logsumexp,
                             void* stream);

// ---- gradients ----

struct AttentionBackwardDims {
  AttentionDims forward;  // shapes, q/k/v strides, mask strides
  // Element strides of the forward's out and of grad_out over [B, H, Lq, Dv].
  int64_t out_strides[4] = {}, grad_out_strides[4] = {};
  // Element strides of grad_q, grad_k, grad_v written by the cuDNN path (all 0: contiguous). The
  // fallback kernels write them contiguous.
  int64_t grad_q_strides[4] = {}, grad_k_strides[4] = {}, grad_v_strides[4] = {};
};

// Fallback kernels: grad_out/q/k/v/out in `dtype` (F32/F64/BF16/F16) with dims' strides,
// logsumexp [B, H, Lq] contiguous in the accumulation type A (f32, f64 for F64), mask nullable: U8
// (0 = drop) or additive in A. row_dot is scratch of B*H*Lq elements of A (receives D_i = dO_i . O_i).
// grad_q/grad_k/grad_v contiguous in dtype. Head dims up to attention_kernel_max_head_dim.
// Deterministic: no atomics; every gradient element is summed by one thread in a fixed order.
void attention_backward(DType dtype, const void* grad_out, const void* q, const void* k, const void* v,
                        const void* out, const void* logsumexp, const void* mask, DType mask_dtype,
                        const AttentionBackwardDims& dims, bool causal, double scale, void* row_dot, void* grad_q,
                        void* grad_k, void* grad_v, void* stream);

// cuDNN sdpa_backward for BF16/F16 (all of grad_out, q, k, v, out with last stride 1 and 16-byte
// aligned), no mask, optional top-left causal mask; logsumexp [B, H, Lq] f32 contiguous (natural
// log, as both forward paths write it); grad_q/grad_k/grad_v contiguous in dtype. Graphs cached per
// shape/stride/dtype/scale. Returns false (having launched nothing) when cuDNN cannot build the
// graph, so the caller can fall back to attention_backward.
bool attention_backward_cudnn(int device, DType dtype, const void* grad_out, const void* q, const void* k,
                              const void* v, const void* out, const float* logsumexp,
                              const AttentionBackwardDims& dims, bool causal, float scale, void* grad_q,
                              void* grad_k, void* grad_v, void* stream);

}  // namespace wick::cuda
