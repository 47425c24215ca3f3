// CUDA launchers for runtime/ops/attention.h: a plain flash-style kernel (any floating dtype,
// strided q/k/v, optional mask) and the cuDNN frontend SDPA graph (bf16/f16, no mask).
//
//   cuda::attention_forward(DType::BF16, q, k, v, nullptr, DType::U8, dims, causal, scale, out, lse, stream);
//   if (!cuda::attention_forward_cudnn(0, DType::BF16, q, k, v, dims, causal, scale, out, lse, stream)) ...
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

}  // namespace wick::cuda
