// Per-element derivatives shared by the CPU and CUDA activation backward kernels (C++17-clean,
// included from .cu files). unary_derivative<kOp>(x) is d op(x) / dx in the compute type.
#pragma once

#include "runtime/ops/elementwise_math.h"

namespace wick {

// Silu, Gelu and GeluTanh (the ops runtime/ops/elementwise_backward.h accepts).
constexpr bool has_unary_backward_kernel(UnaryOp op) {
  return op == UnaryOp::Silu || op == UnaryOp::Gelu || op == UnaryOp::GeluTanh;
}

template <UnaryOp kOp, typename C>
WICK_HD C unary_derivative(C x) {
  const C one = C(1), half = C(0.5);
  if constexpr (kOp == UnaryOp::Silu) {
    C s = one / (one + math::exp(-x));
    return s * (one + x * (one - s));
  } else if constexpr (kOp == UnaryOp::Gelu) {
    // Phi(x) + x phi(x); 1/sqrt(2) and 1/sqrt(2 pi)
    C cdf = half * (one + math::erf(x * C(0.70710678118654752440)));
    C pdf = C(0.39894228040143267794) * math::exp(-half * x * x);
    return cdf + x * pdf;
  } else {
    // GeluTanh, as torch: 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 * 0.044715 x^2), t = tanh(inner)
    const C k = C(0.79788456080286535588), kappa = C(0.044715);
    C x_sq = x * x;
    C t = math::tanh(k * (x + kappa * x_sq * x));
    return half * (one + t) + half * x * (one - t * t) * k * (one + C(3) * kappa * x_sq);
  }
}

template <typename Fn>
void dispatch_unary_backward_op(UnaryOp op, Fn&& fn) {
  switch (op) {
    case UnaryOp::Silu: fn(std::integral_constant<UnaryOp, UnaryOp::Silu>{}); return;
    case UnaryOp::Gelu: fn(std::integral_constant<UnaryOp, UnaryOp::Gelu>{}); return;
    case UnaryOp::GeluTanh: fn(std::integral_constant<UnaryOp, UnaryOp::GeluTanh>{}); return;
    default: return;  // rejected by the front-end
  }
}

}  // namespace wick
