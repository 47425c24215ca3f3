// CUDA row normalization (layer, RMS and group norm forward), called by the norm front-end; the
// device is already current. No CUDA headers here.
//
//   cuda::normalize_rows(problem, DType::BF16, x, weight, bias, y, mean, rstd, stream);
#pragma once

#include "runtime/dtype.h"
#include "runtime/ops/norm_problem.h"

namespace wick::cuda {

// Same contract as cpu::normalize_rows (statistics type float, double for F64). One warp per row
// for rows up to 1024 wide, else one block (256 or 1024 threads) per row; two passes over the row
// (mean, then centred squares) with warp-shuffle reductions in the statistics type.
void normalize_rows(const NormProblem& problem, DType dtype, const void* x, const void* weight, const void* bias,
                    void* y, void* mean, void* rstd, void* stream);

}  // namespace wick::cuda
