// CPU softmax kernels, forward and backward, called by runtime/ops/softmax.cpp once the softmax
// axis has been moved last and the input made contiguous: [n_rows, row_length] matrices.
//
//   cpu::softmax_rows(/*log=*/false, DType::F32, x_ptr, out_ptr, n_rows, row_length);
//   cpu::softmax_backward_rows(DType::BF16, grad_y, y, grad_x, n_rows, row_length);
#pragma once

#include <cstdint>

#include "runtime/dtype.h"

namespace wick::cpu {

// Softmax (or log-softmax) of each row, computed in f32 (f64 for f64), max-subtracted.
void softmax_rows(bool log, DType dtype, const void* x, void* out, int64_t n_rows, int64_t row_length);

// ---- gradients ----
// grad_y, y, grad_x: contiguous [n_rows, row_length] of a floating dtype. Per row,
// grad_x = y * (grad_y - sum(grad_y * y)); the sum accumulates in double, the rest in f32
// (f64 for F64). Rows are split over the cores.
void softmax_backward_rows(DType dtype, const void* grad_y, const void* y, void* grad_x, int64_t n_rows,
                           int64_t row_length);

}  // namespace wick::cpu
