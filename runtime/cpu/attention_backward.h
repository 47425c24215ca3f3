// CPU kernel for runtime/ops/attention_backward.h: exact attention gradients, one task per
// (batch, head), blocks of query rows inside it.
//
//   cpu::attention_backward(DType::F32, grad_out, q, k, v, out, lse, layouts, mask, DType::U8, mask_strides, dims,
//                           causal, scale, grad_q, grad_k, grad_v);
#pragma once

#include <cstdint>

#include "runtime/cpu/attention.h"
#include "runtime/dtype.h"

namespace wick::cpu {

// The operands' rows (RowLayout, runtime/cpu/attention.h): grad_out and out [B, H, Lq, Dv], q
// [B, H, Lq, D], k [B, H, Lk, D], v [B, H, Lk, Dv]; outputs grad_q/grad_k/grad_v shaped as q/k/v.
// logsumexp [B, H, Lq] contiguous. All in `dtype` (F32 or F64). mask (nullable) as in
// attention_forward. Rows whose logsumexp is -inf contribute nothing. The outputs must not overlap
// each other or the inputs.
struct AttentionBackwardLayouts {
  RowLayout grad_out, q, k, v, out, grad_q, grad_k, grad_v;
};

void attention_backward(DType dtype, const void* grad_out, const void* q, const void* k, const void* v,
                        const void* out, const void* logsumexp, const AttentionBackwardLayouts& layouts,
                        const void* mask, DType mask_dtype,
                        const int64_t mask_strides[4], const AttentionDims& dims, bool causal, double scale,
                        void* grad_q, void* grad_k, void* grad_v);

}  // namespace wick::cpu
