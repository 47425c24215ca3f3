// CPU row normalization (layer, RMS and group norm forward), called by the norm front-end.
//
//   cpu::normalize_rows(problem, DType::BF16, x, weight, bias, y, mean, rstd);
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

}  // namespace wick::cpu
