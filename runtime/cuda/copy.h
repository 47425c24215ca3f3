// CUDA copy launcher (any strides, any dtype to any dtype), called by the copy front-end
// (runtime/ops/copy.cpp) after validation, broadcasting and output allocation (cuda_stub.cpp
// without CUDA). It takes the stream explicitly (a cudaStream_t passed as void*) and the device
// is already current.
//
//   cuda::copy_strided(dst, DType::F32, dst_view, src, DType::BF16, src_view, n, stream);
#pragma once

#include <cstdint>

#include "runtime/dtype.h"
#include "runtime/kernel_args.h"

namespace wick::cuda {

void copy_strided(void* dst, DType dst_dtype, const StridedView& dst_view, const void* src, DType src_dtype,
                  const StridedView& src_view, int64_t n, void* stream);

}  // namespace wick::cuda
