// e^x in f32 without a libm call, written so that GCC vectorizes the loops that call it (build the
// caller with -fno-trapping-math; CMakeLists.txt does for the CPU kernels that use it).
//
//   for (int64_t j = 0; j < n; ++j) s[j] = cpu::exp_f32(s[j] - row_max);   // -inf gives 0
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace wick::cpu {

// e^x in f32: x = n·ln2 + r with |r| <= ln2/2, e^r from a degree-7
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

}  // namespace wick::cpu
