// CPU GEMM, called by the matmul and conv front-ends after validation: wick's AVX-512 kernel
// (runtime/cpu/gemm_avx512.h) for the f32 products it suits, OpenBLAS for the rest.
//
//   GemmProblem p = ...;      // see runtime/ops/gemm_problem.h; dtype F32 or F64
//   cpu::gemm(p);             // C[i] = A[i] @ B[i] for every batch index
#pragma once

#include "runtime/ops/gemm_problem.h"

namespace wick::cpu {

// F32 (avx512_gemm or cblas_sgemm) or F64 (cblas_dgemm) only; the front-ends convert 16-bit operands to F32.
// Small products run the batch loop in parallel; large ones are threaded inside each product.
void gemm(const GemmProblem& problem);

// Below this m*n*k OpenBLAS runs a product on one thread, so batches of such products are
// spread over the cores instead.
inline constexpr int64_t small_gemm_flops = 262144;

}  // namespace wick::cpu
