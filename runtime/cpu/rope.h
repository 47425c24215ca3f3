// CPU kernel for runtime/ops/rope.h.
//
//   cpu::apply_rope(out, x, DType::BF16, x_view, x_pair_stride, cos, sin, table_view, n_pairs);
#pragma once

#include <cstdint>

#include "runtime/dtype.h"
#include "runtime/kernel_args.h"

namespace wick::cpu {

// For pair p < n_pairs: x0 = x[x_view.offset_of(2p)], x1 = x0's neighbour at +x_pair_stride;
// c, s = cos/sin[table_view.offset_of(p)] (float, or double for F64 x); writes the rotated pair
// to out[2p], out[2p + 1] (contiguous, x's dtype).
void apply_rope(void* out, const void* x, DType dtype, const StridedView& x_view, int64_t x_pair_stride,
                const void* cos, const void* sin, const StridedView& table_view, int64_t n_pairs);

}  // namespace wick::cpu
