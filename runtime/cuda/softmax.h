// CUDA softmax launchers, forward and backward, for runtime/ops/softmax.h (declarations only; no
// CUDA headers). Same contracts as runtime/cpu/softmax.h on contiguous [n_rows, row_length]
// matrices; the device is already current.
//
//   cuda::softmax_rows(/*log=*/false, DType::BF16, x_ptr, out_ptr, n_rows, row_length, stream);
//   cuda::softmax_backward_rows(DType::BF16, grad_y, y, grad_x, n_rows, row_length, stream);
#pragma once

#include <cstdint>

#include "runtime/dtype.h"

namespace wick::cuda {

// Rows of up to 512 elements get one warp each, longer rows one 256-thread block each.
void softmax_rows(bool log, DType dtype, const void* x, void* out, int64_t n_rows, int64_t row_length,
                  void* stream);

// ---- gradients ----
// Same contract as cpu::softmax_backward_rows, except that the sum accumulates in f32 (f64 for
// F64). Rows up to 16384 elements are held in registers (16 per thread; 2, 8 or 32 lanes of a warp
// per row, or a block of up to 1024 threads) and read once with 16-byte loads when the pointers
// allow; longer rows are streamed from memory twice by 1024 threads.
void softmax_backward_rows(DType dtype, const void* grad_y, const void* y, void* grad_x, int64_t n_rows,
                           int64_t row_length, void* stream);

}  // namespace wick::cuda
