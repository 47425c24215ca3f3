#include "runtime/cpu/softmax.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "runtime/cpu/pairwise_sum.h"
#include "runtime/cpu/parallel.h"
#include "runtime/kernel_args.h"
#include "runtime/ops/elementwise_math.h"
#include "runtime/ops/reduce_math.h"

namespace wick::cpu {
namespace {

template <bool kLog, typename T>
void softmax_typed(const T* x, T* out, int64_t n_rows, int64_t n) {
  using A = accumulate_t<T>;
  int64_t grain = std::max<int64_t>(1, default_grain / n);
  parallel_for(
      n_rows,
      [&](int64_t row_begin, int64_t row_end) {
        for (int64_t r = row_begin; r < row_end; ++r) {
          const T* row = x + r * n;
          T* result = out + r * n;
          A m = row_max<T, A>(row, n);
          A s = pairwise_sum<A>(0, n, [&](int64_t i) { return math::exp(convert<A>(row[i]) - m); });
          if constexpr (kLog) {
            A shift = m + math::log(s);
            for (int64_t i = 0; i < n; ++i) result[i] = convert<T>(convert<A>(row[i]) - shift);
          } else {
            A inverse = A(1) / s;
            for (int64_t i = 0; i < n; ++i) result[i] = convert<T>(math::exp(convert<A>(row[i]) - m) * inverse);
          }
        }
      },
      grain);
}

}  // namespace

void softmax_rows(bool log, DType dtype, const void* x, void* out, int64_t n_rows, int64_t row_length) {
  if (n_rows == 0 || row_length == 0) return;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<accumulate_t<T>>) {
      if (log)
        softmax_typed<true, T>(static_cast<const T*>(x), static_cast<T*>(out), n_rows, row_length);
      else
        softmax_typed<false, T>(static_cast<const T*>(x), static_cast<T*>(out), n_rows, row_length);
    }
  });
}

// ---- gradients ----

namespace {

template <typename T>
void softmax_backward_typed(const T* grad_y, const T* y, T* grad_x, int64_t n_rows, int64_t n) {
  using C = compute_t<T>;
  int64_t grain = std::max<int64_t>(1, default_grain / n);
  parallel_for(
      n_rows,
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const T* g = grad_y + r * n;
          const T* p = y + r * n;
          T* out = grad_x + r * n;
          double dot = 0;
          for (int64_t i = 0; i < n; ++i)
            dot += static_cast<double>(static_cast<C>(g[i])) * static_cast<double>(static_cast<C>(p[i]));
          C total = static_cast<C>(dot);
          for (int64_t i = 0; i < n; ++i)
            out[i] = convert<T>(static_cast<C>(p[i]) * (static_cast<C>(g[i]) - total));
        }
      },
      grain);
}

}  // namespace

void softmax_backward_rows(DType dtype, const void* grad_y, const void* y, void* grad_x, int64_t n_rows,
                           int64_t row_length) {
  if (n_rows == 0 || row_length == 0) return;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<compute_t<T>>) {
      softmax_backward_typed<T>(static_cast<const T*>(grad_y), static_cast<const T*>(y), static_cast<T*>(grad_x),
                                n_rows, row_length);
    }
  });
}

}  // namespace wick::cpu
