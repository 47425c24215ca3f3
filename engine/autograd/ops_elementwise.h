// Differentiable elementwise ops: the runtime ops of runtime/ops/elementwise.h that record the graph
// when an input requires a gradient, and the arithmetic operators on Tensor.
//
//   Tensor y = autograd::mul(x, w) + 1.0;    // records mul and add
//   GradientStore g = backward(autograd::sum(y));
//
// Each op is one Node subclass beside its forward in ops_elementwise.cpp; its gradient rule is
// written with runtime ops and states the derivative in a comment. Broadcast inputs get their
// gradients summed back to their own shapes. Comparisons and where's condition carry no gradient.
#pragma once

#include "runtime/tensor.h"

namespace wick::autograd {

// ---- binary (NumPy broadcasting, promoted dtype, as the runtime ops) ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);

// ---- with a scalar (keeps x's dtype) ----
Tensor add(const Tensor& x, double scalar);
Tensor mul(const Tensor& x, double scalar);

// ---- unary ----
Tensor exp(const Tensor& x);

}  // namespace wick::autograd

namespace wick {

// Operators record gradients (they are the autograd ops above).
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
