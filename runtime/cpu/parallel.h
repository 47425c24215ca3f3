// Splitting loops over the CPU's cores (OpenMP).
//
//   parallel_for(n, [&](int64_t begin, int64_t end) { for (i = begin; i < end; ++i) ... });
//
// Runs on one thread when n is below `grain` (default 32768 elements), so small ops pay no
// threading cost. The body must be safe to run concurrently on disjoint ranges.
#pragma once

#include <algorithm>
#include <cstdint>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace wick::cpu {

inline constexpr int64_t default_grain = 32768;

inline int max_threads() {
#if defined(_OPENMP)
  return omp_get_max_threads();
#else
  return 1;
#endif
}

template <typename Body>
void parallel_for(int64_t n, const Body& body, int64_t grain = default_grain) {
  if (n <= 0) return;
#if defined(_OPENMP)
  int64_t n_chunks = std::min<int64_t>(max_threads(), (n + grain - 1) / grain);
  if (n_chunks > 1 && !omp_in_parallel()) {
#pragma omp parallel for num_threads(static_cast<int>(n_chunks)) schedule(static)
    for (int64_t chunk = 0; chunk < n_chunks; ++chunk) {
      int64_t begin = n * chunk / n_chunks, end = n * (chunk + 1) / n_chunks;
      body(begin, end);
    }
    return;
  }
#endif
  body(0, n);
}

}  // namespace wick::cpu
