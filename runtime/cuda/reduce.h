// CUDA row reductions and softmax (declarations only; no CUDA headers). Same contracts as
// runtime/cpu/reduce.h: the input is a contiguous [n_rows, row_length] matrix, row_length >= 1.
// Rows of up to 512 elements get one warp each, longer rows one 256-thread block each.
//
//   cuda::reduce_rows(ReduceOp::Max, DType::F16, x_ptr, out_ptr, n_rows, row_length, 0.0, stream);
#pragma once

#include <cstdint>

#include "runtime/dtype.h"
#include "runtime/ops/reduce_math.h"

namespace wick::cuda {

void reduce_rows(ReduceOp op, DType dtype, const void* x, void* out, int64_t n_rows, int64_t row_length,
                 double correction, void* stream);
void softmax_rows(bool log, DType dtype, const void* x, void* out, int64_t n_rows, int64_t row_length,
                  void* stream);

}  // namespace wick::cuda
