// Checks and preparation shared by the attention forward and backward (runtime/ops/attention.cpp),
// so both agree on shapes, masks and on when cuDNN runs.
//
//   validate_attention("scaled_dot_product_attention", q, k, v, mask);
//   Tensor m = prepare_attention_mask(mask, DType::F32, {B, H, Lq, Lk});
//   if (attention_cudnn_eligible(q, k, v, mask)) ...;   // false without the cuDNN frontend
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "runtime/cpu/attention.h"
#include "runtime/cuda/attention.h"
#include "runtime/ops/copy.h"
#include "runtime/tensor.h"

namespace wick {

// q [B, H, Lq, D], k [B, H, Lk, D], v [B, H, Lk, Dv] of one floating dtype on one device; mask
// (optional) U8 or floating, broadcastable to [B, H, Lq, Lk]. Messages name `op`.
inline void validate_attention(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask) {
  WICK_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, op, ": q, k, v must be [B, H, L, D], got q ",
             q.describe(), ", k ", k.describe(), ", v ", v.describe());
  WICK_CHECK(is_floating(q.dtype()) && k.dtype() == q.dtype() && v.dtype() == q.dtype(), op,
             ": q, k, v must share one floating dtype, got q ", q.describe(), ", k ", k.describe(), ", v ",
             v.describe());
  WICK_CHECK(k.device() == q.device() && v.device() == q.device(), op, ": q ", q.describe(), ", k ", k.describe(),
             " and v ", v.describe(), " must be on one device");
  WICK_CHECK(k.size(0) == q.size(0) && v.size(0) == q.size(0) && k.size(1) == q.size(1) && v.size(1) == q.size(1),
             op, ": batch and head counts differ: q ", q.describe(), ", k ", k.describe(), ", v ", v.describe());
  WICK_CHECK(k.size(3) == q.size(3), op, ": head dim of q ", q.describe(), " and k ", k.describe(), " differ");
  WICK_CHECK(v.size(2) == k.size(2), op, ": k ", k.describe(), " and v ", v.describe(),
             " differ in the number of keys");
  WICK_CHECK(q.size(3) >= 1, op, ": head dim must be at least 1, got ", q.describe());
  if (!mask.defined()) return;
  WICK_CHECK(mask.dtype() == DType::U8 || is_floating(mask.dtype()), op,
             ": mask must be u8 (nonzero = keep) or floating (additive), got ", mask.describe());
  WICK_CHECK(mask.device() == q.device(), op, ": mask ", mask.describe(), " is on another device than q ",
             q.describe());
  WICK_CHECK(mask.dim() <= 4, op, ": mask ", mask.describe(), " has more than 4 axes");
  Shape scores = {q.size(0), q.size(1), q.size(2), k.size(2)};
  WICK_CHECK(broadcast_shapes(mask.shape(), scores, op) == scores, op, ": mask ", mask.describe(),
             " does not broadcast to the scores ", scores);
}

// The mask ready for a kernel: U8 as is, floating cast to `additive_dtype`, broadcast to the scores.
inline Tensor prepare_attention_mask(const Tensor& mask, DType additive_dtype, const Shape& scores) {
  if (!mask.defined()) return mask;
  Tensor m = (mask.dtype() == DType::U8 || mask.dtype() == additive_dtype) ? mask : cast(mask, additive_dtype);
  return m.expand(scores);
}

// A view with no zero stride on an axis longer than 1 (a broadcast gradient becomes dense).
inline Tensor without_broadcast(const Tensor& t) {
  for (int64_t a = 0; a < t.dim(); ++a)
    if (t.size(a) > 1 && t.strides()[static_cast<size_t>(a)] == 0) return t.contiguous();
  return t;
}

// An uninitialized dense [B, H, L, D] tensor whose first three axes lie in memory in the order of
// `like`'s strides (the last axis stays innermost): outputs and gradients of attention then share
// the layout of its inputs, so head permutes around it ([B, L, H, D] <-> [B, H, L, D]) stay views.
inline Tensor empty_in_layout_of(const Tensor& like, const Shape& shape, DType dtype) {
  std::vector<int64_t> order = {0, 1, 2};
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return like.strides()[static_cast<size_t>(a)] > like.strides()[static_cast<size_t>(b)];
  });
  order.push_back(3);
  Shape permuted;
  std::vector<int64_t> inverse(4);
  for (size_t i = 0; i < 4; ++i) {
    permuted.push_back(shape[static_cast<size_t>(order[i])]);
    inverse[static_cast<size_t>(order[i])] = static_cast<int64_t>(i);
  }
  return Tensor::empty(permuted, dtype, like.device()).permute(inverse);
}

// The rows of a [B, H, L, D] tensor for the CPU kernels (runtime/cpu/attention.h), or none when its
// last axis is not contiguous or its rows overlap (a broadcast along L): then it needs a copy.
inline std::optional<cpu::RowLayout> cpu_row_layout(const Tensor& t) {
  const Strides& s = t.strides();
  const int64_t cols = t.size(3);
  if (cols > 1 && s[3] != 1) return std::nullopt;
  if (s[0] < 0 || s[1] < 0 || s[2] < 0) return std::nullopt;
  int64_t row = s[2];
  if (t.size(2) <= 1) row = std::max(row, cols);  // one row: its stride is never used
  if (row < cols) return std::nullopt;
  return cpu::RowLayout{s[0], s[1], std::max<int64_t>(row, 1)};
}

// `t` in `dtype` with a CPU row layout: itself when it has one, else a contiguous copy.
inline Tensor cpu_attention_operand(const Tensor& t, DType dtype) {
  if (t.dtype() != dtype) return cast(t, dtype);
  return cpu_row_layout(t) ? t : t.contiguous();
}

// The cuDNN SDPA graphs (forward and backward) take bf16/f16 q/k/v, no mask, D and Dv multiples of
// 8 in [8, 128].
// WICK_CUDNN_ATTENTION=0 in the environment sends every problem to wick's own kernels (to compare
// them with cuDNN's, or to run compute-sanitizer's racecheck on wick's kernels alone).
inline bool cudnn_attention_enabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("WICK_CUDNN_ATTENTION");
    return !(value && std::string(value) == "0");
  }();
  return enabled && cuda::cudnn_attention_compiled();
}

inline bool attention_cudnn_eligible(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask) {
  int64_t d = q.size(3), dv = v.size(3);
  return cudnn_attention_enabled() && (q.dtype() == DType::BF16 || q.dtype() == DType::F16) &&
         !mask.defined() && d % 8 == 0 && dv % 8 == 0 && d >= 8 && dv >= 8 && d <= 128 && dv <= 128 &&
         q.size(2) >= 1 && k.size(2) >= 1 && q.numel() > 0;
}

// cuDNN wants unit stride on the last axis, 16-byte aligned rows and base pointer.
inline Tensor aligned_for_cudnn(const Tensor& t) {
  const Strides& s = t.strides();
  bool ok = s[3] == 1 && s[0] % 8 == 0 && s[1] % 8 == 0 && s[2] % 8 == 0 &&
            reinterpret_cast<uintptr_t>(t.data()) % 16 == 0;
  return ok ? t : t.clone();
}

inline void fill_attention_strides(int64_t (&to)[4], const Strides& from) {
  for (int i = 0; i < 4; ++i) to[i] = from[static_cast<size_t>(i)];
}

}  // namespace wick
