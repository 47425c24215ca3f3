#include "runtime/cpu/gelu_avx512.h"

#include "runtime/cpu/gelu_tanh.h"

namespace wick::cpu {

// GCC inlines gelu_tanh.h's functions (built for the baseline ISA) into these AVX-512 functions and
// vectorizes the loops 16 wide; the file is built with -fno-trapping-math (CMakeLists.txt), as the
// other exp_f32 callers are.
#if defined(__x86_64__)
#define WICK_AVX512_512 __attribute__((target("avx512f,prefer-vector-width=512")))
#else
#define WICK_AVX512_512
#endif

WICK_AVX512_512 void gelu_tanh_forward_avx512(const float* x, float* y, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) y[i] = gelu_tanh_value(x[i]);
}

WICK_AVX512_512 void gelu_tanh_backward_avx512(const float* grad, const float* x, float* out, int64_t begin,
                                               int64_t end) {
  for (int64_t i = begin; i < end; ++i) out[i] = grad[i] * gelu_tanh_derivative(x[i]);
}

}  // namespace wick::cpu
