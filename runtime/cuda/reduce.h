// CUDA row reductions (declarations only; no CUDA headers). Same contracts as runtime/cpu/reduce.h:
// the input is a contiguous [n_rows, row_length] matrix, row_length >= 1. (Softmax:
// runtime/cuda/softmax.h.)
// Rows of up to 512 elements get one warp each, longer rows one 256-thread block each; a few long
// rows (fewer than 256, at least 32768 elements) are split over many blocks and combined in a
// second pass (runtime/cuda/reduce_split.cu), deterministic, in the caller's workspace.
//
//   int64_t bytes = cuda::reduce_workspace_bytes(ReduceOp::Sum, n_rows, row_length);   // 0: none needed
//   cuda::reduce_rows(ReduceOp::Max, DType::F16, x_ptr, out_ptr, n_rows, row_length, 0.0, workspace, stream);
#pragma once

#include <cstdint>

#include "runtime/dtype.h"
#include "runtime/ops/reduce_math.h"

namespace wick::cuda {

// Device bytes reduce_rows wants as `workspace` for this problem (0 when rows are reduced in one pass).
int64_t reduce_workspace_bytes(ReduceOp op, int64_t n_rows, int64_t row_length);
// `workspace` holds reduce_workspace_bytes(...) bytes, or is null (one block per row then).
void reduce_rows(ReduceOp op, DType dtype, const void* x, void* out, int64_t n_rows, int64_t row_length,
                 double correction, void* workspace, void* stream);
// The split path alone: false (nothing launched) when the problem is not split or workspace is null.
bool reduce_rows_split(ReduceOp op, DType dtype, const void* x, void* out, int64_t n_rows, int64_t row_length,
                       double correction, void* workspace, void* stream);

}  // namespace wick::cuda
