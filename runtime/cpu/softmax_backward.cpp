#include "runtime/cpu/softmax_backward.h"

#include <algorithm>
#include <type_traits>

#include "runtime/cpu/parallel.h"
#include "runtime/kernel_args.h"

namespace wick::cpu {
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
