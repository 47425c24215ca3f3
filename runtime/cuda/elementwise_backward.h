// CUDA activation backward launchers (declarations only; no CUDA headers). Same contract as
// runtime/cpu/elementwise_backward.h; the stream (a cudaStream_t) comes last.
//
//   cuda::unary_backward(UnaryOp::Gelu, DType::BF16, grad_ptr, x_ptr, out_ptr, n, stream);
#pragma once

#include <cstdint>

#include "runtime/dtype.h"
#include "runtime/ops/elementwise_math.h"

namespace wick::cuda {

void unary_backward(UnaryOp op, DType dtype, const void* grad, const void* x, void* out, int64_t n, void* stream);

}  // namespace wick::cuda
