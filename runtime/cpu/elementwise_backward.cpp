#include "runtime/cpu/elementwise_backward.h"

#include <type_traits>

#include "runtime/cpu/cpu_features.h"
#include "runtime/cpu/gelu_avx512.h"
#include "runtime/cpu/gelu_tanh.h"
#include "runtime/cpu/parallel.h"
#include "runtime/kernel_args.h"
#include "runtime/ops/elementwise_backward_math.h"

namespace wick::cpu {

void unary_backward(UnaryOp op, DType dtype, const void* grad, const void* x, void* out, int64_t n) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<compute_t<T>>) {
      using C = compute_t<T>;
      const T* g = static_cast<const T*>(grad);
      const T* xs = static_cast<const T*>(x);
      T* o = static_cast<T*>(out);
      dispatch_unary_backward_op(op, [&](auto op_tag) {
        constexpr UnaryOp kOp = decltype(op_tag)::value;
        if constexpr (kOp == UnaryOp::GeluTanh && std::is_same_v<T, float>) {
          if (cpu_has_avx512f()) {
            parallel_for(n, [&](int64_t begin, int64_t end) { gelu_tanh_backward_avx512(g, xs, o, begin, end); });
            return;
          }
        }
        parallel_for(n, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) {
            C x_i = convert<C>(xs[i]);
            C d = kOp == UnaryOp::GeluTanh ? gelu_tanh_derivative(x_i) : unary_derivative<kOp>(x_i);
            o[i] = convert<T>(convert<C>(g[i]) * d);
          }
        });
      });
    }
  });
}

}  // namespace wick::cpu
