// CUDA row normalization (layer, RMS and group norm forward), called by the norm front-end; the
// device is already current. No CUDA headers here.
//
//   cuda::normalize_rows(problem, DType::BF16, x, weight, bias, y, mean, rstd, stream);
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

}  // namespace wick::cuda
