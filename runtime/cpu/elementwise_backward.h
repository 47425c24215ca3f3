// CPU activation backward kernels, called by runtime/ops/elementwise_backward.cpp after validation.
//
//   cpu::unary_backward(UnaryOp::Gelu, DType::F32, grad_ptr, x_ptr, out_ptr, n);
#pragma once

#include <cstdint>

#include "runtime/dtype.h"
#include "runtime/ops/elementwise_math.h"

namespace wick::cpu {

// out[i] = grad[i] * op'(x[i]); all contiguous, of `dtype` (floating); op Silu, Gelu or GeluTanh.
void unary_backward(UnaryOp op, DType dtype, const void* grad, const void* x, void* out, int64_t n);

}  // namespace wick::cpu
