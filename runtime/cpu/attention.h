// CPU kernel for runtime/ops/attention.h: exact softmax attention, blocks of query rows per task.
//
//   cpu::attention_forward(DType::F32, q, k, v, mask, DType::U8, mask_strides, dims, causal, scale, out, lse);
#pragma once

#include <cstdint>

#include "runtime/dtype.h"

namespace wick::cpu {

struct AttentionDims {
  int64_t batch = 0, heads = 0, n_queries = 0, n_keys = 0, head_dim = 0, value_dim = 0;
};

// q [B, H, Lq, D], k [B, H, Lk, D], v [B, H, Lk, Dv] contiguous in `dtype` (F32 or F64); out
// [B, H, Lq, Dv] and logsumexp [B, H, Lq] contiguous in dtype. mask (nullable) is U8 (0 = drop)
// or additive in `dtype`, addressed as b*s[0] + h*s[1] + i*s[2] + j*s[3] (strides may be 0).
// Causal keeps key j for query i when j <= i. Rows with no kept key get out 0, logsumexp -inf.
void attention_forward(DType dtype, const void* q, const void* k, const void* v, const void* mask, DType mask_dtype,
                       const int64_t mask_strides[4], const AttentionDims& dims, bool causal, double scale, void* out,
                       void* logsumexp);

}  // namespace wick::cpu
