// CUDA row normalization (layer, RMS and group norm forward) and its gradients, called by the norm
// front-end; the device is already current. No CUDA headers here.
//
//   cuda::normalize_rows(problem, DType::BF16, x, weight, bias, y, mean, rstd, stream);
//   cuda::normalize_rows_backward(problem, DType::BF16, grad_y, x, mean, rstd, weight,
//                                 grad_x, grad_weight, grad_bias, stream);
#pragma once

#include "runtime/dtype.h"
#include "runtime/ops/norm_problem.h"

namespace wick::cuda {

// Same contract as cpu::normalize_rows (statistics type float, double for F64). Rows up to 16384
// elements are held in registers (16 per thread; 2, 8 or 32 lanes of a warp per row, or a block of
// up to 1024 threads), read once with 16-byte loads when the pointers allow, and normalized in two
// passes over the held values (mean, then centred squares) with warp-shuffle sums. Longer rows are
// streamed from memory three times by 1024 threads.
void normalize_rows(const NormProblem& problem, DType dtype, const void* x, const void* weight, const void* bias,
                    void* y, void* mean, void* rstd, void* stream);

// ---- gradients ----
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
