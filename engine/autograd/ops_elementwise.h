// Differentiable elementwise ops: the runtime ops of runtime/ops/elementwise.h that record the graph
// when an input requires a gradient, and the arithmetic operators on Tensor.
//
//   Tensor y = autograd::mul(x, w) + 1.0;    // records mul and add
//   Tensor z = autograd::where(autograd::gt(x, 0.0), x, y);   // the mask carries no gradient
//   GradientStore g = backward(autograd::sum(y));
//
// Each op is one Node subclass beside its forward in ops_elementwise.cpp; its gradient rule is
// written with runtime ops and states the derivative in a comment. Broadcast inputs get their
// gradients summed back to their own shapes. Gradients have the output's (promoted) dtype.
// Points where an op is not differentiable use torch's conventions: abs and relu have gradient 0
// at 0; maximum/minimum split the gradient half/half between equal operands.
#pragma once

#include "runtime/tensor.h"

namespace wick::autograd {

// ---- binary (NumPy broadcasting, promoted dtype, as the runtime ops) ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
// d/da = b a^(b-1) (0 where b == 0); d/db = a^b log(a) (0 where a == 0 and b >= 0), as torch.
Tensor pow(const Tensor& a, const Tensor& b);
// Where a == b each operand gets half the gradient (torch.maximum / torch.minimum); NaN inputs
// give no meaningful gradient.
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);

// ---- with a scalar (keeps x's dtype); the scalar is a constant ----
Tensor add(const Tensor& x, double scalar);
Tensor sub(const Tensor& x, double scalar);
Tensor sub(double scalar, const Tensor& x);
Tensor mul(const Tensor& x, double scalar);
Tensor div(const Tensor& x, double scalar);
Tensor div(double scalar, const Tensor& x);
// d/dx = e x^(e-1) (0 everywhere when e == 0).
Tensor pow(const Tensor& x, double exponent);
// d/dx = base^x log(base) (0 where base == 0 and x >= 0).
Tensor pow(double base, const Tensor& x);
// Ties (x == scalar) pass half the gradient to x, like torch.maximum(x, tensor(scalar)). (torch's
// clamp(min=) would pass all of it; use where(ge(x, c), x, c) for that rule.)
Tensor maximum(const Tensor& x, double scalar);
Tensor minimum(const Tensor& x, double scalar);

// ---- unary ----
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);  // subgradient 0 at x == 0 (torch's sign(x))
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor square(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);  // gradient 0 at x == 0 (torch)
Tensor silu(const Tensor& x);
Tensor gelu(const Tensor& x);       // erf form: d/dx = Phi(x) + x phi(x)
Tensor gelu_tanh(const Tensor& x);  // torch's approximate="tanh" and its derivative

// cond ? a : b (runtime semantics). a and b get the gradient where cond is true / false; cond
// (any dtype, usually a u8 mask) gets none.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

// ---- comparisons: NOT differentiable. Plain runtime results (u8 0/1) that never require a
// gradient; they exist here so that code written against autograd:: reads uniformly.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& x, double scalar);
Tensor ne(const Tensor& x, double scalar);
Tensor lt(const Tensor& x, double scalar);
Tensor le(const Tensor& x, double scalar);
Tensor gt(const Tensor& x, double scalar);
Tensor ge(const Tensor& x, double scalar);

}  // namespace wick::autograd

namespace wick {

// Operators record gradients (they are the autograd ops above; unary minus is neg).
Tensor operator-(const Tensor& x);
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& x, double scalar);
Tensor operator+(double scalar, const Tensor& x);
Tensor operator-(const Tensor& x, double scalar);
Tensor operator-(double scalar, const Tensor& x);
Tensor operator*(const Tensor& x, double scalar);
Tensor operator*(double scalar, const Tensor& x);
Tensor operator/(const Tensor& x, double scalar);
Tensor operator/(double scalar, const Tensor& x);

}  // namespace wick
