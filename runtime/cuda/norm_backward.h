// CUDA gradients of the row normalizations (layer, RMS and group norm), called by the
// norm_backward front-end; the device is already current. No CUDA headers here.
//
//   cuda::normalize_rows_backward(problem, DType::BF16, grad_y, x, mean, rstd, weight,
//                                 grad_x, grad_weight, grad_bias, stream);
#pragma once

#include "runtime/dtype.h"
#include "runtime/ops/norm_problem.h"

namespace wick::cuda {

// Same contract as cpu::normalize_rows_backward (statistics type float, double for F64; sums in
// the statistics type). grad_x: one warp per row for rows up to 1024 wide, else one block per row,
// like the forward. grad_weight / grad_bias: per-block partial sums (layer/RMS: tiles of 32
// columns by chunks of rows; group norm: one block per sample and channel) written to a scratch
// buffer, then a second kernel sums the partials of each channel in a fixed order: deterministic,
// no atomics.
void normalize_rows_backward(const NormProblem& problem, DType dtype, const void* grad_y, const void* x,
                             const void* mean, const void* rstd, const void* weight, void* grad_x, void* grad_weight,
                             void* grad_bias, void* stream);

}  // namespace wick::cuda
