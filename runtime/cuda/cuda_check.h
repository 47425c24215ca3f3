// Checking macros for CUDA library calls; include only from CUDA-enabled translation units.
//
//   CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, stream));
//   CUBLAS_CHECK(cublasLtMatmul(...));
//   CUDNN_CHECK(cudnnConvolutionForward(...));
#pragma once

#include <cuda_runtime.h>

#include "runtime/error.h"

#define CUDA_CHECK(call)                                                                          \
  do {                                                                                            \
    cudaError_t wick_status_ = (call);                                                            \
    if (wick_status_ != cudaSuccess)                                                              \
      ::wick::detail::throw_error(::wick::ErrorKind::Runtime, __FILE__, __LINE__,                 \
                                  ::wick::detail::concat(#call, " failed: ",                      \
                                                         cudaGetErrorString(wick_status_)));      \
  } while (0)

// After a kernel launch: reports launch-configuration errors at the launch site.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

#define CUBLAS_CHECK(call)                                                                        \
  do {                                                                                            \
    int wick_status_ = static_cast<int>(call);                                                    \
    if (wick_status_ != 0)                                                                        \
      ::wick::detail::throw_error(::wick::ErrorKind::Runtime, __FILE__, __LINE__,                 \
                                  ::wick::detail::concat(#call, " failed with cuBLAS status ",    \
                                                         wick_status_));                          \
  } while (0)

#define CUDNN_CHECK(call)                                                                         \
  do {                                                                                            \
    cudnnStatus_t wick_status_ = (call);                                                          \
    if (wick_status_ != CUDNN_STATUS_SUCCESS)                                                     \
      ::wick::detail::throw_error(::wick::ErrorKind::Runtime, __FILE__, __LINE__,                 \
                                  ::wick::detail::concat(#call, " failed: ",                      \
                                                         cudnnGetErrorString(wick_status_)));     \
  } while (0)
