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
// the statistics type). Rows up to 8192 elements are held in registers as in the forward, so
// grad_y and x are read once; layer/RMS norm fold grad_weight / grad_bias into that pass: one wave
// of blocks, each summing its rows' g * xhat and g per column into one partial row, then a second
// kernel sums the partial rows in a fixed order (deterministic on a given GPU, no atomics). Group
// norm (and rows too long for registers) computes the parameter gradients in a separate pass with
// per-block partials (group norm: one block per sample and channel).
void normalize_rows_backward(const NormProblem& problem, DType dtype, const void* grad_y, const void* x,
                             const void* mean, const void* rstd, const void* weight, void* grad_x, void* grad_weight,
                             void* grad_bias, void* stream);

}  // namespace wick::cuda
