// GELU with the tanh approximation for the CPU kernels, in the sigmoid form
//   0.5·x·(1 + tanh(u)) = x·σ(2u),   u = sqrt(2/π)·(x + 0.044715·x³),
// an identity that needs one exp instead of tanh (libm's tanhf goes through expm1f and costs several
// times more). In f32 the exp is a branch-free polynomial (exp_f32 below) that the compiler vectorizes. The derivative uses 0.5·(1 + tanh u) = σ(2u) and 1 − tanh²u = 4·σ(2u)·(1 − σ(2u)):
//   d/dx = s + 2·x·s·(1 − s)·sqrt(2/π)·(1 + 3·0.044715·x²),   s = σ(2u).
//
//   float y = cpu::gelu_tanh_value(x);   float dy_dx = cpu::gelu_tanh_derivative(x);
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "runtime/cpu/exp_f32.h"

namespace wick::cpu {

// σ(2u) for GELU's tanh argument u(x); exp overflow gives 0 (x → −∞) and exp → 0 gives 1.
template <typename C>
inline C gelu_tanh_gate(C x) {
  const C k = C(0.79788456080286535588), kappa = C(0.044715);
  C two_u = C(2) * k * (x + kappa * x * x * x);
  if constexpr (std::is_same_v<C, float>)
    return 1.0f / (1.0f + exp_f32(-two_u));
  else
    return C(1) / (C(1) + std::exp(-two_u));
}

template <typename C>
inline C gelu_tanh_value(C x) {
  return x * gelu_tanh_gate(x);
}

template <typename C>
inline C gelu_tanh_derivative(C x) {
  const C k = C(0.79788456080286535588), kappa = C(0.044715);
  C s = gelu_tanh_gate(x);
  return s + C(2) * x * s * (C(1) - s) * k * (C(1) + C(3) * kappa * x * x);
}

}  // namespace wick::cpu
