// Rotary position embedding as in Flux / SD3 (EmbedND + apply_rope), on interleaved pairs.
//
//   RopeTables t = rope_frequencies(ids, {16, 56, 56}, 10000.0);   // ids [L, 3] -> cos, sin [L, 64]
//   Tensor q_rotated = apply_rope(q, t.cos, t.sin);                 // q [B, H, L, 128]
//
// Pair i of the head dimension, (x[2i], x[2i+1]), is rotated by angle a[l, i]:
//   out[2i] = cos a * x[2i] - sin a * x[2i+1],   out[2i+1] = sin a * x[2i] + cos a * x[2i+1].
#pragma once

#include <vector>

#include "runtime/tensor.h"

namespace wick {

struct RopeTables {
  Tensor cos;  // [..., D/2], f32 unless asked otherwise
  Tensor sin;  // [..., D/2]
};

// positions [..., n_axes] (any real or integer dtype, any device) -> cos/sin [..., D/2] on the
// same device, D = sum(axes_dims) (each even). Per axis k: omega_j = theta^(-2j / dim_k) for
// j < dim_k / 2, angle = position[k] * omega_j; axes concatenated in order. Computed in double on
// the host (the positions are copied back from a GPU), then rounded to table_dtype (f32 as Flux;
// f64 for float64 checks).
RopeTables rope_frequencies(const Tensor& positions, const std::vector<int64_t>& axes_dims, double theta = 10000.0,
                            DType table_dtype = DType::F32);

// x [..., L, D] (D even; f32/bf16/f16/f64, any strides), cos/sin broadcastable to
// [*x.shape[:-1], D/2] (e.g. [L, D/2] or [B, 1, L, D/2] for x [B, H, L, D]). Computes in f32
// (f64 for f64 x) and returns a new contiguous tensor in x's dtype.
Tensor apply_rope(const Tensor& x, const Tensor& cos, const Tensor& sin);

}  // namespace wick
