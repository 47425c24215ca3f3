// GELU with the tanh approximation for the CPU kernels, in the sigmoid form
//   0.5·x·(1 + tanh(u)) = x·σ(2u),   u = sqrt(2/π)·(x + 0.044715·x³),
// an identity that needs one exp instead of tanh (libm's tanhf goes through expm1f and costs several
// times more). In f32 the exp is a branch-free polynomial (exp_f32 below) that the compiler vectorizes. The derivative uses 0.5·(1 + tanh u) = σ(2u) and 1 − tanh²u = 4·σ(2u)·(1 − σ(2u)):
//   d/dx = s + 2·x·s·(1 − s)·sqrt(2/π)·(1 + 3·0.044715·x²),   s = σ(2u).
//
//   float y = cpu::gelu_tanh_value(x);   float dy_dx = cpu::gelu_tanh_derivative(x);
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

namespace wick::cpu {

// e^x in f32 for the gate, without a libm call: x = n·ln2 + r with |r| <= ln2/2, e^r from a degree-7
// polynomial (the Cephes expf coefficients, about 1 ulp), 2^n from the exponent bits. Saturates: inf above
// 88.3 and 0 below −87.3 (where the true value is within 2.5 of overflow / underflow); NaN stays NaN.
inline float exp_f32(float x) {
  // One select per statement: nested conditionals keep GCC from vectorizing the caller's loop.
  float c = x > 88.3f ? 88.3f : x;
  c = c < -87.3f ? -87.3f : c;
  const float n = (c * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
  float r = c - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const float scale = std::bit_cast<float>(static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23);
  float e = p * scale;
  e = x > 88.3f ? INFINITY : e;
  e = x < -87.3f ? 0.0f : e;
  return e;
}

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
