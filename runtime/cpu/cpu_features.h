// What this x86 CPU offers beyond the level wick's C++ is built for (CMake WICK_CPU_ARCH), for the
// kernels that pick an AVX-512 path at run time (runtime/cpu/gemm_avx512.h, gelu_avx512.h).
//
//   if (cpu::cpu_has_avx512f()) ...
#pragma once

namespace wick::cpu {

// AVX-512F with the OS saving the zmm state (GCC's check reads XGETBV); false off x86-64. Checked once.
inline bool cpu_has_avx512f() {
#if defined(__x86_64__)
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  return has;
#else
  return false;
#endif
}

}  // namespace wick::cpu
