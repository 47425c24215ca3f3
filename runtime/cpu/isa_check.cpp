// Start-up check of the CPU's instruction set against the level wick was built for
// (CMake WICK_CPU_ARCH, e.g. x86-64-v3): a clear message and exit status 2 instead of an illegal
// instruction somewhere later. This file is compiled for the baseline x86-64 ISA (CMakeLists.txt)
// and runs as a constructor of libwick, before any other code of the library.
#include <cstdio>
#include <cstdlib>

#if defined(WICK_CPU_ARCH_NAME) && (defined(__x86_64__) || defined(__i386__))
namespace {

__attribute__((constructor(101))) void wick_check_cpu_isa() {
  __builtin_cpu_init();
  const char* missing = nullptr;
  if (!__builtin_cpu_supports("avx2")) missing = "AVX2";
  else if (!__builtin_cpu_supports("fma")) missing = "FMA";
  else if (!__builtin_cpu_supports("bmi2")) missing = "BMI2";
  if (missing == nullptr) return;
  std::fprintf(stderr,
               "wick: this build targets %s but this CPU has no %s; rebuild wick with "
               "-DWICK_CPU_ARCH= (empty: the compiler's default) or a lower level\n",
               WICK_CPU_ARCH_NAME, missing);
  std::_Exit(2);
}

}  // namespace
#endif
