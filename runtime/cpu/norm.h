// CPU row normalization (layer, RMS and group norm forward) and its gradients, called by the norm
// front-end.
//
//   cpu::normalize_rows(problem, DType::BF16, x, weight, bias, y, mean, rstd);
//   cpu::normalize_rows_backward(problem, DType::BF16, grad_y, x, mean, rstd, weight,
//                                grad_x, grad_weight, grad_bias);
#pragma once

#include "runtime/dtype.h"
#include "runtime/ops/norm_problem.h"

namespace wick::cpu {

// x and y [rows, row_size] contiguous of `dtype` (F32, F64, BF16, F16). weight, bias (may be
// null), mean and rstd [rows] are of the statistics type: double for F64, float otherwise.
// y = (x - mean) * rstd * weight[channel] + bias[channel]; mean is not written when
// !subtract_mean. Sums accumulate in double; rows run in parallel.
void normalize_rows(const NormProblem& problem, DType dtype, const void* x, const void* weight, const void* bias,
                    void* y, void* mean, void* rstd);

// ---- gradients ----
// grad_y, x and grad_x [rows, row_size] contiguous of `dtype` (F32, F64, BF16, F16). mean (null
// for RMS), rstd [rows], weight (may be null) and grad_weight / grad_bias [n_channels] (each may be
// null: not computed) are of the statistics type: double for F64, float otherwise. n_channels is
// row_size for layer/RMS norm and groups * channels_per_group for group norm. Sums in double;
// rows (grad_x) and channels (grad_weight, grad_bias) run in parallel.
void normalize_rows_backward(const NormProblem& problem, DType dtype, const void* grad_y, const void* x,
                             const void* mean, const void* rstd, const void* weight, void* grad_x, void* grad_weight,
                             void* grad_bias);

}  // namespace wick::cpu
