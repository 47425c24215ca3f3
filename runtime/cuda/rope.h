// CUDA launcher for runtime/ops/rope.h; same contract as cpu::apply_rope.
//
//   cuda::apply_rope(out, x, DType::BF16, x_view, x_pair_stride, cos, sin, table_view, n_pairs, stream);
#pragma once

#include <cstdint>

#include "runtime/dtype.h"
#include "runtime/kernel_args.h"

namespace wick::cuda {

void apply_rope(void* out, const void* x, DType dtype, const StridedView& x_view, int64_t x_pair_stride,
                const void* cos, const void* sin, const StridedView& table_view, int64_t n_pairs, void* stream);

}  // namespace wick::cuda
