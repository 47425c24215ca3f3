#include "runtime/cpu/rope.h"

#include "runtime/cpu/parallel.h"

namespace wick::cpu {

void apply_rope(void* out, const void* x, DType dtype, const StridedView& x_view, int64_t x_pair_stride,
                const void* cos, const void* sin, const StridedView& table_view, int64_t n_pairs) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<compute_t<T>>) {
      using C = compute_t<T>;
      T* o = static_cast<T*>(out);
      const T* in = static_cast<const T*>(x);
      const C* c_table = static_cast<const C*>(cos);
      const C* s_table = static_cast<const C*>(sin);
      parallel_for(n_pairs, [&](int64_t begin, int64_t end) {
        for (int64_t p = begin; p < end; ++p) {
          int64_t at = x_view.offset_of(2 * p), table_at = table_view.offset_of(p);
          C x0 = static_cast<C>(in[at]), x1 = static_cast<C>(in[at + x_pair_stride]);
          C c = c_table[table_at], s = s_table[table_at];
          o[2 * p] = convert<T>(c * x0 - s * x1);
          o[2 * p + 1] = convert<T>(s * x0 + c * x1);
        }
      });
    }
  });
}

}  // namespace wick::cpu
