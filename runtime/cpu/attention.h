// CPU kernels for runtime/ops/attention.h: exact softmax attention, blocks of query rows per task;
// exact attention gradients, one task per (batch, head), blocks of query rows inside it.
//
//   cpu::AttentionLayouts at{.q = dense_rows(H, Lq, D), .k = ..., .v = ..., .out = ...};
//   cpu::attention_forward(DType::F32, q, k, v, at, mask, DType::U8, mask_strides, dims, causal, scale, out, lse);
//   cpu::attention_backward(DType::F32, grad_out, q, k, v, out, lse, layouts, mask, DType::U8, mask_strides, dims,
//                           causal, scale, grad_q, grad_k, grad_v);
#pragma once

#include <cstdint>
#include <limits>

#include "runtime/dtype.h"

namespace wick::cpu {

struct AttentionDims {
  int64_t batch = 0, heads = 0, n_queries = 0, n_keys = 0, head_dim = 0, value_dim = 0;
};

// Where the rows of a [B, H, L, D] operand lie: element (b, h, i, e) at b*batch + h*head + i*row + e
// (in elements). The last axis is contiguous and row >= D, so every (b, h) slice is a BLAS matrix
// with leading dimension `row`: q [B, L, H, D] in memory (a head split of a [B, L, H·D] projection)
// has row H·D, head D. Operands may overlap only where they are read (never an output).
struct RowLayout {
  int64_t batch = 0, head = 0, row = 0;
  int64_t at(int64_t b, int64_t h) const { return b * batch + h * head; }
};
// The dense [B, H, L, D] layout.
inline RowLayout dense_rows(int64_t heads, int64_t length, int64_t dim) {
  return {heads * length * dim, length * dim, dim};
}

struct AttentionLayouts {
  RowLayout q, k, v, out;
};

// s[j] = -inf where the U8 mask row m (`step` apart) holds 0; a contiguous row vectorizes.
template <typename C>
inline void drop_masked(C* s, const uint8_t* m, int64_t step, int64_t n) {
  const C minus_inf = -std::numeric_limits<C>::infinity();
  if (step == 1) {
    for (int64_t j = 0; j < n; ++j) s[j] = m[j] == 0 ? minus_inf : s[j];
    return;
  }
  for (int64_t j = 0; j < n; ++j)
    if (m[j * step] == 0) s[j] = minus_inf;
}

// q [B, H, Lq, D], k [B, H, Lk, D], v [B, H, Lk, Dv] and out [B, H, Lq, Dv] in `dtype` (F32 or F64)
// at `layouts`; logsumexp [B, H, Lq] contiguous in dtype. mask (nullable) is U8 (0 = drop)
// or additive in `dtype`, addressed as b*s[0] + h*s[1] + i*s[2] + j*s[3] (strides may be 0).
// Causal keeps key j for query i when j <= i. Rows with no kept key get out 0, logsumexp -inf.
void attention_forward(DType dtype, const void* q, const void* k, const void* v, const AttentionLayouts& layouts,
                       const void* mask, DType mask_dtype,
                       const int64_t mask_strides[4], const AttentionDims& dims, bool causal, double scale, void* out,
                       void* logsumexp);

// ---- gradients ----
// The operands' rows (RowLayout, above): grad_out and out [B, H, Lq, Dv], q
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
