// CUDA GEMM through cuBLASLt, called by the matmul and conv front-ends after validation; the
// device is already current. No CUDA headers here.
//
//   cuda::gemm(problem, stream);   // C[i] = A[i] @ B[i], f32 accumulation for 16-bit types
#pragma once

#include "runtime/ops/gemm_problem.h"

namespace wick::cuda {

// F32, BF16, F16 (CUBLAS_COMPUTE_32F: exact f32 products, no TF32) and F64. The innermost
// coalesced batch axis becomes a strided batch (stride 0 for broadcast operands); outer batch
// axes loop on the host. Descriptors and the chosen algorithm are cached per problem shape; the
// cuBLASLt handle and a 32 MiB workspace are created lazily per device and stream.
void gemm(const GemmProblem& problem, void* stream);

}  // namespace wick::cuda
