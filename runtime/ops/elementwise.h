// Elementwise ops: unary math, binary arithmetic and comparisons with NumPy broadcasting, where;
// and the fused backward of the activations (gelu, gelu_tanh, silu).
//
//   Tensor y = gelu_tanh(x);                    // same shape and dtype as x
//   Tensor z = add(a, b);                       // a [4, 1, 3] with b [5, 1] -> [4, 5, 3], promoted dtype
//   Tensor s = div(add(mul(x, 0.5), 1.0), y);     // scalars keep x's dtype
//   Tensor m = gt(x, 0.0);                      // u8 mask of 0/1
//   Tensor r = where(m, x, zeros_like(x));      // cond, a, b broadcast together
//   Tensor grad_x = gelu_backward(grad_y, x);   // grad_y * d gelu(x) / dx
//
// Inputs may be strided views (broadcast axes have stride 0); outputs are new contiguous tensors on
// the inputs' device. 16-bit floats are computed in f32, f64 in f64, integers in their own type.
// Integer rules: add/sub/mul/neg/square/pow wrap around (two's complement); div truncates toward
// zero like C++; x / 0 == 0 for integers (no crash, no error); pow with a negative exponent is 0
// unless the base is 1 or -1. maximum/minimum propagate NaN.
#pragma once

#include "runtime/ops/elementwise_math.h"
#include "runtime/tensor.h"

namespace wick {

const char* unary_op_name(UnaryOp op);    // "exp", "gelu_tanh", ...
const char* binary_op_name(BinaryOp op);  // "add", "maximum", "lt", ...

// ---- unary: same shape and dtype as x. Floating dtypes only, except neg/abs/square/relu,
// which also take integer dtypes. gelu is the erf form; gelu_tanh is torch's approximate="tanh".
Tensor unary(UnaryOp op, const Tensor& x);
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor square(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor silu(const Tensor& x);
Tensor gelu(const Tensor& x);
Tensor gelu_tanh(const Tensor& x);

// ---- binary: a and b broadcast (NumPy rules) on the same device; result dtype is
// promote_types(a, b), or u8 (0/1) for the comparisons eq/ne/lt/le/gt/ge.
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);

// ---- with a scalar: the result keeps x's dtype (u8 for comparisons). Floating x: the scalar is
// used in the compute type (f32 for 16-bit floats), not rounded to x's dtype first. Integer x:
// the scalar must be a whole number (else WickError); arithmetic wraps in x's dtype.
// scalar_first computes op(scalar, x) (e.g. 1 - x).
Tensor binary(BinaryOp op, const Tensor& x, double scalar, bool scalar_first = false);
Tensor add(const Tensor& x, double scalar);
Tensor sub(const Tensor& x, double scalar);
Tensor sub(double scalar, const Tensor& x);
Tensor mul(const Tensor& x, double scalar);
Tensor div(const Tensor& x, double scalar);
Tensor div(double scalar, const Tensor& x);
Tensor pow(const Tensor& x, double exponent);
Tensor pow(double base, const Tensor& x);
Tensor maximum(const Tensor& x, double scalar);
Tensor minimum(const Tensor& x, double scalar);
Tensor eq(const Tensor& x, double scalar);
Tensor ne(const Tensor& x, double scalar);
Tensor lt(const Tensor& x, double scalar);
Tensor le(const Tensor& x, double scalar);
Tensor gt(const Tensor& x, double scalar);
Tensor ge(const Tensor& x, double scalar);

// cond ? a : b elementwise. cond has any dtype (nonzero, including NaN, is true); a and b are
// promoted; all three broadcast together; all on one device.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

// Arithmetic operators (a + b, x * 2.0, ...) are defined by engine/autograd/ops_elementwise.h,
// where they record gradients; runtime code calls the named functions above.

// ---- gradients ----
// Backward kernels of the activations whose derivative the elementwise ops cannot express in one
// pass (gelu needs erf, which is not an elementwise op; silu and gelu_tanh would take 5-8 passes),
// e.g. unary_backward(UnaryOp::Silu, grad_y, x).
// grad and x have the same shape and the same floating dtype (f32, f64, bf16, f16) on one device;
// 16-bit floats are computed in f32. Inputs may be strided (they are made contiguous first); the
// result is a new contiguous tensor of x's shape and dtype.
// op is Silu, Gelu or GeluTanh (others throw).
Tensor unary_backward(UnaryOp op, const Tensor& grad, const Tensor& x);
// grad * sigmoid(x) (1 + x (1 - sigmoid(x)))
Tensor silu_backward(const Tensor& grad, const Tensor& x);
// grad * (Phi(x) + x phi(x)), Phi / phi the standard normal cdf / density (torch's gelu backward).
Tensor gelu_backward(const Tensor& grad, const Tensor& x);
// grad * derivative of 0.5 x (1 + tanh(k (x + 0.044715 x^3))), k = sqrt(2/pi) (torch's formula).
Tensor gelu_tanh_backward(const Tensor& grad, const Tensor& x);

}  // namespace wick
