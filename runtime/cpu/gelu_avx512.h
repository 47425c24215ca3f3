// GELU (tanh approximation) over f32 ranges with AVX-512, chosen at run time by the elementwise
// kernels when cpu_has_avx512f() (runtime/cpu/cpu_features.h): the same formulas as gelu_tanh.h,
// vectorized 16 wide instead of the build's 8, for the MLPs of DiT-sized models where GELU is bound by
// arithmetic, not memory.
//
//   cpu::gelu_tanh_forward_avx512(x, y, begin, end);            // y[i] = gelu(x[i])
//   cpu::gelu_tanh_backward_avx512(grad, x, out, begin, end);   // out[i] = grad[i] * gelu'(x[i])
#pragma once

#include <cstdint>

namespace wick::cpu {

// Require cpu_has_avx512f().
void gelu_tanh_forward_avx512(const float* x, float* y, int64_t begin, int64_t end);
void gelu_tanh_backward_avx512(const float* grad, const float* x, float* out, int64_t begin, int64_t end);

}  // namespace wick::cpu
