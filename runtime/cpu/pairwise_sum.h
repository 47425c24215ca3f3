// Pairwise summation, and the maximum of a row of T in the accumulation type A: the row pieces the
// CPU reduce and softmax kernels share (runtime/cpu/reduce.cpp, softmax.cpp).
//
//   A s = pairwise_sum<A>(0, n, [&](int64_t i) { return convert<A>(row[i]); });
//   A m = row_max<T, A>(row, n);   // NaN propagates
#pragma once

#include <cstdint>

#include "runtime/kernel_args.h"
#include "runtime/ops/elementwise_math.h"
#include "runtime/ops/reduce_math.h"

namespace wick::cpu {

// Pairwise summation of load(0..n): error grows with log(n), not n, in f32.
template <typename A, typename Load>
A pairwise_sum(int64_t begin, int64_t n, const Load& load) {
  constexpr int64_t block = 256, lanes = 8;
  if (n <= block) {
    A partial[lanes] = {};
    int64_t i = 0;
    for (; i + lanes <= n; i += lanes)
      for (int64_t k = 0; k < lanes; ++k) partial[k] += load(begin + i + k);
    A total = A(0);
    for (; i < n; ++i) total += load(begin + i);
    for (int64_t k = 0; k < lanes; ++k) total += partial[k];
    return total;
  }
  int64_t half = (n / 2 + lanes - 1) / lanes * lanes;
  return pairwise_sum<A>(begin, half, load) + pairwise_sum<A>(begin + half, n - half, load);
}

template <typename T, typename A>
A row_max(const T* row, int64_t n) {
  A best = lowest_value<A>();
  for (int64_t i = 0; i < n; ++i) best = math::maximum(best, convert<A>(row[i]));
  return best;
}

}  // namespace wick::cpu
