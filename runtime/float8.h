// The float8 e4m3 format (PyTorch's torch.float8_e4m3fn, safetensors' F8_E4M3): conversions shared
// by the CPU and CUDA kernels (runtime/cpu/float8.h, runtime/cuda/float8.h). wick has no float8
// DType: e4m3 values live as U8 bytes (codes), with f32 scales beside them (runtime/ops/float8.h).
//
//   uint8_t code = f32_to_e4m3(0.3f);      // 0x2a, as torch.tensor(0.3).to(torch.float8_e4m3fn)
//   uint8_t top = f32_to_e4m3(1000.0f);    // 0x7e (448): saturated, as torch's conversion
//   float back = e4m3_to_f32(code);        // 0.3125, as codes.to(torch.float32)
//
// The format: 1 sign bit, 4 exponent bits (bias 7), 3 mantissa bits; no infinities; S.1111.111
// (0x7f, 0xff) is NaN; the largest finite value is 448 (0x7e), the smallest normal 2^-6 and the
// smallest subnormal 2^-9. The functions reproduce c10's fp8e4m3fn_from_fp32_value and
// fp8e4m3fn_to_fp32_value bit for bit (tests/runtime/float8_test.cpp checks every code and a large
// set of values against PyTorch 2.15's tensor.to(torch.float8_e4m3fn)): rounding is to nearest even;
// finite values past ±448 and ±inf saturate to ±448 (as torch's conversion does, and as
// x.clamp(-448, 448) before it would); NaN stays NaN (0x7f with the input's sign bit). c10's scalar
// routine alone would turn |x| >= 464 into NaN: torch clamps first, and so does wick.
#pragma once

#include <cstdint>

#include "runtime/dtype.h"

namespace wick {

inline constexpr float e4m3_max = 448.0f;

// Leading zeros of a 32-bit word (32 for 0).
WICK_HD uint32_t count_leading_zeros(uint32_t x) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint32_t>(__clz(static_cast<int>(x)));
#else
  return x == 0 ? 32u : static_cast<uint32_t>(__builtin_clz(x));
#endif
}

// The f32 value of an e4m3 code (exact; NaN codes give the NaN bits torch gives, sign kept).
WICK_HD float e4m3_to_f32(uint8_t code) {
  const uint32_t w = static_cast<uint32_t>(code) << 24;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t nonsign = w & 0x7fffffffu;
  // Subnormals: shift the mantissa up until its leading one is the implicit bit.
  uint32_t renorm_shift = count_leading_zeros(nonsign);
  renorm_shift = renorm_shift > 4 ? renorm_shift - 4 : 0;
  // All-ones exponent and mantissa (0x7f) set the f32 exponent to all ones (NaN).
  const int32_t inf_nan_mask = (static_cast<int32_t>(nonsign + 0x01000000u) >> 8) & static_cast<int32_t>(0x7f800000);
  // Zero stays zero.
  const int32_t zero_mask = static_cast<int32_t>(nonsign - 1) >> 31;
  const uint32_t magnitude = ((nonsign << renorm_shift >> 4) + ((0x78u - renorm_shift) << 23)) |
                             static_cast<uint32_t>(inf_nan_mask);
  return bits_float(sign | (magnitude & ~static_cast<uint32_t>(zero_mask)));
}

namespace detail {
// c10's fp8e4m3fn_from_fp32_value: round to nearest even, without saturation (|x| >= 480, inf and
// NaN give NaN, and so do values that round above 448). f32_to_e4m3 clamps before calling it.
WICK_HD uint8_t f32_to_e4m3_unclamped(float f) {
  constexpr uint32_t nan_from = 1087u << 20;    // 480.0f: NaN whatever the rounding
  constexpr uint32_t denorm_mask = 141u << 23;  // 2^14: adding it rounds to the 2^-9 subnormal grid
  uint32_t bits = float_bits(f);
  const uint32_t sign = bits & 0x80000000u;
  bits ^= sign;
  uint8_t result;
  if (bits >= nan_from) {
    result = 0x7f;
  } else if (bits < (121u << 23)) {  // below 2^-6, the smallest normal: subnormal or zero
#if defined(__CUDA_ARCH__)
    const float sum = __fadd_rn(bits_float(bits), bits_float(denorm_mask));
#else
    const float sum = bits_float(bits) + bits_float(denorm_mask);
#endif
    result = static_cast<uint8_t>(float_bits(sum) - denorm_mask);
  } else {
    const uint32_t mantissa_odd = (bits >> 20) & 1u;
    bits += (static_cast<uint32_t>(7 - 127) << 23) + 0x7ffffu;  // rebias the exponent, round half down...
    bits += mantissa_odd;                                        // ... or up to the even neighbour
    result = static_cast<uint8_t>(bits >> 20);
  }
  return static_cast<uint8_t>(result | (sign >> 24));
}
}  // namespace detail

// torch's f32 -> float8_e4m3fn: round to nearest even, saturating to ±448; NaN stays NaN.
WICK_HD uint8_t f32_to_e4m3(float f) {
  const float clamped = f > e4m3_max ? e4m3_max : (f < -e4m3_max ? -e4m3_max : f);  // NaN compares false: kept
  return detail::f32_to_e4m3_unclamped(clamped);
}

// The scale of a row (or tensor) whose largest |w| is `amax`: amax / 448 (an f32 division), so that
// w / scale spans e4m3's range; 1 for a row of zeros (and for NaN: callers refuse non-finite weights).
WICK_HD float e4m3_scale(float amax) {
#if defined(__CUDA_ARCH__)
  return amax > 0.0f ? __fdiv_rn(amax, e4m3_max) : 1.0f;
#else
  return amax > 0.0f ? amax / e4m3_max : 1.0f;
#endif
}

}  // namespace wick
