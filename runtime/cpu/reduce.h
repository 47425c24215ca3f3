// CPU row reductions, called by runtime/ops/reduce.cpp once the reduced axes have been moved last
// and the input made contiguous: the input is an [n_rows, row_length] matrix. (Softmax:
// runtime/cpu/softmax.h.)
//
//   cpu::reduce_rows(ReduceOp::Sum, DType::BF16, x_ptr, out_ptr, n_rows, row_length, 0.0);
#pragma once

#include <cstdint>

#include "runtime/dtype.h"
#include "runtime/ops/reduce_math.h"

namespace wick::cpu {

// out[r] = op(row r). out's type is reduce_output_t<op, T>; row_length >= 1 (the front-end handles
// empty rows). `correction` is used by Var only. Ties in ArgMax go to the first index; NaN wins.
void reduce_rows(ReduceOp op, DType dtype, const void* x, void* out, int64_t n_rows, int64_t row_length,
                 double correction);
// Sum (or mean) over the middle axis of a contiguous [outer, mid, inner] tensor (reduced axes that are
// neither leading the rows nor trailing, e.g. a bias gradient [rows, features] -> [features]), without
// moving them last: out[o, i] = sum_m x[o, m, i] (/ mid). Floating dtypes; mid >= 1. Accumulates blocks
// of 256 rows in the accumulator type, then adds the blocks (error grows with mid / 256 + 256).
void sum_middle(DType dtype, const void* x, void* out, int64_t outer, int64_t mid, int64_t inner, bool mean);

}  // namespace wick::cpu
