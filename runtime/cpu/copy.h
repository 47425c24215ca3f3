// CPU copy kernel (any strides, any dtype to any dtype), called by the copy front-end
// (runtime/ops/copy.cpp) after it has validated shapes and dtypes, broadcast and allocated the
// output. Kernels trust their arguments.
//
//   cpu::copy_strided(dst_ptr, DType::F32, dst_view, src_ptr, DType::BF16, src_view, n);
#pragma once

#include <cstdint>

#include "runtime/dtype.h"
#include "runtime/kernel_args.h"

namespace wick::cpu {

// Element i of src (walked through src_view) converted into element i of dst (dst_view).
void copy_strided(void* dst, DType dst_dtype, const StridedView& dst_view, const void* src, DType src_dtype,
                  const StridedView& src_view, int64_t n);

}  // namespace wick::cpu
