// The description of a (batched) row-major GEMM that the matmul and conv front-ends hand to the
// CPU (OpenBLAS) and CUDA (cuBLASLt) backends: C[i] = A[i] @ B[i] for every batch index i.
//
//   GemmProblem p;  p.dtype = DType::F32;  p.m = 4;  p.n = 5;  p.k = 3;
//   p.a = a_ptr;  p.lda = 3;  p.b = b_ptr;  p.ldb = 5;  p.c = c_ptr;  p.ldc = 5;
//   cpu::gemm(p);                                  // one 4x3 @ 3x5 product
//
// Each operand is either row-major (element (r, c) at r * ld + c) or, when `*_transposed`, stored
// column-major (element (r, c) at r + c * ld); matrix_layout() picks one from a view's strides
// without copying. C++17-clean: included by the CUDA backend.
#pragma once

#include <algorithm>
#include <cstdint>

#include "runtime/dtype.h"
#include "runtime/kernel_args.h"

namespace wick {

struct GemmProblem {
  DType dtype = DType::F32;  // of A, B and C alike
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;  // m x k
  bool a_transposed = false;
  int64_t lda = 1;
  const void* b = nullptr;  // k x n
  bool b_transposed = false;
  int64_t ldb = 1;
  void* c = nullptr;  // m x n, always row-major
  int64_t ldc = 1;
  bool accumulate = false;  // C += A @ B (beta = 1) instead of C = A @ B
  // CPU only, not with `accumulate`: C = bias + A @ B, bias a contiguous row of n values (C's dtype)
  // added to every row of every product (a linear layer's bias, without a broadcast copy into C first).
  const void* bias = nullptr;
  // Batch: n_batch products; the i-th reads A at a + a_batch.offset_of(i) elements, and so on.
  // The batch views hold the coalesced batch axes (rank 0 for a single product).
  int64_t n_batch = 1;
  StridedView a_batch, b_batch, c_batch;
};

struct MatrixLayout {
  bool usable = false;     // false: the view needs a contiguous copy first
  bool transposed = false; // stored column-major
  int64_t ld = 1;
};

// How a rows x cols view with these strides can be handed to BLAS without a copy.
inline MatrixLayout matrix_layout(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  int64_t row_major_ld = rows == 1 ? std::max<int64_t>(1, cols) : row_stride;
  if ((col_stride == 1 || cols <= 1) && row_major_ld >= std::max<int64_t>(1, cols)) return {true, false, row_major_ld};
  int64_t col_major_ld = cols == 1 ? std::max<int64_t>(1, rows) : col_stride;
  if ((row_stride == 1 || rows <= 1) && col_major_ld >= std::max<int64_t>(1, rows)) return {true, true, col_major_ld};
  return {};
}

}  // namespace wick
