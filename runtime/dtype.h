// Element types, their sizes and names, and the 16-bit float conversions shared by CPU and CUDA code.
//
//   DType t = DType::BF16;  dtype_size(t) == 2;  dtype_name(t) == "bf16";
//   uint16_t h = f32_to_bf16(1.5f);  float f = bf16_to_f32(h);   // round to nearest even
//
// F64 exists for float64 references and finite-difference checks on the CPU; training uses
// f32, bf16 and f16.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#if defined(__CUDACC__)
#define WICK_HD __host__ __device__ __forceinline__
#else
#define WICK_HD inline
#endif

namespace wick {

enum class DType : uint8_t { F32, F64, BF16, F16, I32, I64, U8, I8 };
inline constexpr int n_dtypes = 8;

WICK_HD int dtype_size(DType t) {
  switch (t) {
    case DType::F64: case DType::I64: return 8;
    case DType::F32: case DType::I32: return 4;
    case DType::BF16: case DType::F16: return 2;
    default: return 1;
  }
}
WICK_HD bool is_floating(DType t) {
  return t == DType::F32 || t == DType::F64 || t == DType::BF16 || t == DType::F16;
}
WICK_HD bool is_integral(DType t) { return !is_floating(t); }

const char* dtype_name(DType t);
// Parses "f32", "float32", "bf16", "bfloat16", "fp16", "f16", ...; throws listing the valid names.
DType parse_dtype(const std::string& name);
// Type promotion for binary ops: floats win over integers, wider wins, bf16+f16 -> f32.
DType promote_types(DType a, DType b);

// ---- 16-bit float conversions (bit-exact, round to nearest even; NaN stays NaN) ----
WICK_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
WICK_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

WICK_HD uint16_t f32_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
WICK_HD float bf16_to_f32(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

WICK_HD uint16_t f32_to_f16(float f) {
  uint32_t u = float_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {
    // Subnormal or zero in f16: add 0.5 (as a float) so the FPU rounds to the 2^-24 grid.
    float magnitude = bits_float(abs) + 0.5f;
    return static_cast<uint16_t>(sign | (float_bits(magnitude) - 0x3f000000u));
  }
  uint32_t mantissa_odd = (abs >> 13) & 1u;
  abs += 0xc8000fffu + mantissa_odd;  // rebias exponent (-112 << 23) and round to nearest even
  return static_cast<uint16_t>(sign | (abs >> 13));
}
WICK_HD float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    // zero or subnormal: mantissa * 2^-24
    float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return bits_float(sign | float_bits(magnitude));
  }
  if (exponent == 31) return bits_float(sign | 0x7f800000u | (mantissa << 13));
  return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

// Storage-level 16-bit types. They hold bits; arithmetic happens in f32.
struct bf16 {
  uint16_t bits;
  bf16() = default;
  WICK_HD explicit bf16(float f) : bits(f32_to_bf16(f)) {}
  WICK_HD operator float() const { return bf16_to_f32(bits); }
};
struct f16 {
  uint16_t bits;
  f16() = default;
  WICK_HD explicit f16(float f) : bits(f32_to_f16(f)) {}
  WICK_HD operator float() const { return f16_to_f32(bits); }
};

// Maps a C++ element type to its DType.
template <typename T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::F32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::F64; };
template <> struct dtype_of<bf16> { static constexpr DType value = DType::BF16; };
template <> struct dtype_of<f16> { static constexpr DType value = DType::F16; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::I32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::I64; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::U8; };
template <> struct dtype_of<int8_t> { static constexpr DType value = DType::I8; };

// Calls fn with a value of the C++ type of t: dispatch_dtype(t, [&](auto tag) { using T = decltype(tag); ... });
template <typename Fn>
decltype(auto) dispatch_dtype(DType t, Fn&& fn) {
  switch (t) {
    case DType::F32: return fn(float{});
    case DType::F64: return fn(double{});
    case DType::BF16: return fn(bf16{});
    case DType::F16: return fn(f16{});
    case DType::I32: return fn(int32_t{});
    case DType::I64: return fn(int64_t{});
    case DType::U8: return fn(uint8_t{});
    default: return fn(int8_t{});
  }
}

// The type arithmetic on T happens in: f32 for 16-bit floats, T itself otherwise.
template <typename T> struct compute_type { using type = T; };
template <> struct compute_type<bf16> { using type = float; };
template <> struct compute_type<f16> { using type = float; };
template <typename T> using compute_t = typename compute_type<T>::type;

}  // namespace wick
