// wick's own f32 GEMM for x86 CPUs with AVX-512, for the products where one operand is small enough to
// stay in the L2 cache: the linear layers of small models (a DiT's 1568 x 96 x 96 or 96 x 384 x 1568),
// where OpenBLAS spends a large share of its time packing both operands. Chosen at run time by
// cpu::gemm (runtime/cpu/matmul.cpp); everything else goes to OpenBLAS.
//
//   if (cpu::avx512_gemm_suits(p)) cpu::avx512_gemm(p, a, b, c, /*threads=*/true);
//
// The kernel: C is cut into tiles of 14 rows x 32 columns, each held in 28 zmm registers over a slice
// of up to 256 k and then written (C = A @ B, or C += A @ B when p.accumulate). A is read in place (its 14 values of
// one k are broadcast); B is read in place when row-major, or first copied into 32-column panels when
// stored column-major (a weight used as W^T). Each element of C is a fused multiply-add chain over
// each slice of 256 k, the slices added to C in order (the first to the bias or C's old values),
// whatever the thread count: the result does not depend on it. Threads split the tiles, never K.
#pragma once

#include "runtime/ops/gemm_problem.h"

namespace wick::cpu {

// True on an x86-64 CPU with AVX-512F (checked once), unless the environment variable WICK_CPU_GEMM is
// "openblas" (every f32 product then goes to OpenBLAS, for comparisons).
bool avx512_gemm_available();

// avx512_gemm_available() and this F32 product has an operand of at most avx512_gemm_max_operand_bytes
// (A when B is the larger), so that the other can be streamed past it, and the streamed operand's
// rows lie at most avx512_gemm_max_stride elements apart where it is read across them.
bool avx512_gemm_suits(const GemmProblem& p);
inline constexpr int64_t avx512_gemm_max_operand_bytes = int64_t{1} << 20;
inline constexpr int64_t avx512_gemm_max_stride = 4096;

// One product of p (a, b, c point at its operands; p's batch fields are ignored): C = alpha (A @ B),
// C += alpha (A @ B) when p.accumulate, C = bias + alpha (A @ B) when p.bias. `threads`: split the
// tiles over the OpenMP threads (when not already inside a parallel region). Any m, n, k >= 1 (the
// attention kernels call it on their per-head products directly). Requires avx512_gemm_available().
void avx512_gemm(const GemmProblem& p, const float* a, const float* b, float* c, bool threads, float alpha = 1.0f);

// The row-major f32 product C [m, n] (=|+=) op(A) [m, k] @ op(B) [k, n] as a GemmProblem, op transposing
// an operand stored the other way (BLAS's convention).
inline GemmProblem f32_product(bool a_transposed, bool b_transposed, int64_t m, int64_t n, int64_t k, const float* a,
                               int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  GemmProblem p;
  p.dtype = DType::F32;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a = a;
  p.a_transposed = a_transposed;
  p.lda = lda;
  p.b = b;
  p.b_transposed = b_transposed;
  p.ldb = ldb;
  p.c = c;
  p.ldc = ldc;
  p.accumulate = accumulate;
  return p;
}

}  // namespace wick::cpu
