// Backward kernels of the activations whose derivative the elementwise ops cannot express in one
// pass (gelu needs erf, which is not an elementwise op; silu and gelu_tanh would take 5-8 passes).
//
//   Tensor grad_x = gelu_backward(grad_y, x);              // grad_y * d gelu(x) / dx
//   Tensor grad_x = unary_backward(UnaryOp::Silu, grad_y, x);
//
// grad and x have the same shape and the same floating dtype (f32, f64, bf16, f16) on one device;
// 16-bit floats are computed in f32. Inputs may be strided (they are made contiguous first); the
// result is a new contiguous tensor of x's shape and dtype.
#pragma once

#include "runtime/ops/elementwise_math.h"
#include "runtime/tensor.h"

namespace wick {

// op is Silu, Gelu or GeluTanh (others throw).
Tensor unary_backward(UnaryOp op, const Tensor& grad, const Tensor& x);
// grad * sigmoid(x) (1 + x (1 - sigmoid(x)))
Tensor silu_backward(const Tensor& grad, const Tensor& x);
// grad * (Phi(x) + x phi(x)), Phi / phi the standard normal cdf / density (torch's gelu backward).
Tensor gelu_backward(const Tensor& grad, const Tensor& x);
// grad * derivative of 0.5 x (1 + tanh(k (x + 0.044715 x^3))), k = sqrt(2/pi) (torch's formula).
Tensor gelu_tanh_backward(const Tensor& grad, const Tensor& x);

}  // namespace wick
