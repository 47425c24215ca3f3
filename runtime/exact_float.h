// Single-rounding float operations: each is exactly one IEEE operation rounded to nearest, never
// contracted into an FMA by either compiler, so host and device code produce the same bits
// (the Philox normals and the optimizers rely on it).
//
//   float y = add_rn(mul_rn(a, b), c);     // two roundings on CPU and GPU alike
//   float z = fma_rn(a, b, c);             // one rounding, explicitly
#pragma once

#include <cmath>

#include "runtime/dtype.h"  // WICK_HD

namespace wick {

WICK_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
WICK_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
WICK_HD float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
WICK_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
WICK_HD float sqrt_rn(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}
WICK_HD float fma_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

}  // namespace wick
