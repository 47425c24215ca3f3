// CUDA launchers for runtime/ops/attention_backward.h: two deterministic kernels (any floating
// dtype, strided inputs, optional mask) and the cuDNN frontend sdpa_backward graph (bf16/f16, no mask).
//
//   cuda::attention_backward(DType::BF16, grad_out, q, k, v, out, lse, nullptr, DType::U8, dims, causal, scale,
//                            row_dot, grad_q, grad_k, grad_v, stream);
//   if (!cuda::attention_backward_cudnn(0, DType::BF16, grad_out, q, k, v, out, lse, dims, causal, scale, grad_q,
//                                       grad_k, grad_v, stream)) ...
#pragma once

#include <cstdint>

#include "runtime/cuda/attention.h"
#include "runtime/dtype.h"

namespace wick::cuda {

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
