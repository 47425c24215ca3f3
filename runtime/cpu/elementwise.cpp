#include "runtime/cpu/elementwise.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "runtime/cpu/cpu_features.h"
#include "runtime/cpu/gelu_avx512.h"
#include "runtime/cpu/gelu_tanh.h"
#include "runtime/cpu/parallel.h"
#include "runtime/kernel_args.h"
#include "runtime/ops/elementwise_math.h"

namespace wick::cpu {
namespace {

// unary_value, except GeluTanh in its one-exp sigmoid form (runtime/cpu/gelu_tanh.h).
template <UnaryOp kOp, typename C>
inline C cpu_unary_value(C x) {
  if constexpr (kOp == UnaryOp::GeluTanh && std::is_floating_point_v<C>)
    return gelu_tanh_value(x);
  else
    return unary_value<kOp>(x);
}

template <UnaryOp kOp, typename T>
void unary_typed(const T* x, const StridedView& x_view, T* out, int64_t n) {
  using C = compute_t<T>;
  if constexpr (kOp == UnaryOp::GeluTanh && std::is_same_v<T, float>) {
    if (view_is_flat(x_view) && cpu_has_avx512f()) {
      parallel_for(n, [&](int64_t begin, int64_t end) { gelu_tanh_forward_avx512(x, out, begin, end); });
      return;
    }
  }
  if (view_is_flat(x_view)) {
    parallel_for(n, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) out[i] = convert<T>(cpu_unary_value<kOp>(convert<C>(x[i])));
    });
    return;
  }
  parallel_for(n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = convert<T>(cpu_unary_value<kOp>(convert<C>(x[x_view.offset_of(i)])));
  });
}

// The broadcast layouts (at least one operand strided, e.g. x [B, N, D] · scale [B, 1, D]): rows of
// the innermost axis of the shared coalesced shape, offsets computed once per row, then an inner
// loop that the compiler vectorizes when both inner strides are 0 or 1.
template <typename T, typename O, typename Apply>
void binary_rows(const OperandLoader<T>& a, const OperandLoader<T>& b, O* out, int64_t n, const Apply& apply) {
  using C = compute_t<T>;
  using Mode = typename OperandLoader<T>::Mode;
  const StridedView& shape_view = a.mode == Mode::Strided ? a.view : b.view;  // the shared shape
  const int64_t inner = shape_view.rank == 0 ? 1 : shape_view.shape[shape_view.rank - 1];
  const int64_t n_rows = inner > 0 ? n / inner : 0;
  // Offset of row r's first element and the inner stride of each operand (scalars: stride 0).
  auto row_start = [inner](const OperandLoader<T>& op, int64_t r) -> int64_t {
    if (op.mode == Mode::Flat) return r * inner;
    return op.mode == Mode::Strided ? op.view.offset_of(r * inner) : 0;
  };
  auto inner_stride = [](const OperandLoader<T>& op) -> int64_t {
    if (op.mode == Mode::Flat) return 1;
    return op.mode == Mode::Strided && op.view.rank > 0 ? op.view.strides[op.view.rank - 1] : 0;
  };
  const int64_t step_a = inner_stride(a), step_b = inner_stride(b);
  parallel_for(
      n_rows,
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          O* o = out + r * inner;
          const int64_t at_a = row_start(a, r), at_b = row_start(b, r);
          auto value = [](const OperandLoader<T>& op, int64_t at) -> C {
            return op.mode == Mode::Scalar ? op.scalar : convert<C>(op.data[at]);
          };
          if (step_a == 1 && step_b == 1) {
            const T* pa = a.data + at_a;
            const T* pb = b.data + at_b;
            for (int64_t j = 0; j < inner; ++j) o[j] = apply(convert<C>(pa[j]), convert<C>(pb[j]));
          } else if (step_a == 1 && step_b == 0) {
            const T* pa = a.data + at_a;
            const C vb = value(b, at_b);
            for (int64_t j = 0; j < inner; ++j) o[j] = apply(convert<C>(pa[j]), vb);
          } else if (step_a == 0 && step_b == 1) {
            const C va = value(a, at_a);
            const T* pb = b.data + at_b;
            for (int64_t j = 0; j < inner; ++j) o[j] = apply(va, convert<C>(pb[j]));
          } else {
            for (int64_t j = 0; j < inner; ++j) {
              C va = a.mode == Mode::Scalar ? a.scalar : convert<C>(a.data[at_a + j * step_a]);
              C vb = b.mode == Mode::Scalar ? b.scalar : convert<C>(b.data[at_b + j * step_b]);
              o[j] = apply(va, vb);
            }
          }
        }
      },
      std::max<int64_t>(1, default_grain / std::max<int64_t>(inner, 1)));
}

template <BinaryOp kOp, typename T>
void binary_typed(const ElementwiseOperand& a, const ElementwiseOperand& b, void* out_ptr, int64_t n) {
  using C = compute_t<T>;
  using O = std::conditional_t<is_comparison(kOp), uint8_t, T>;
  O* out = static_cast<O*>(out_ptr);
  OperandLoader<T> load_a = make_loader<T>(a), load_b = make_loader<T>(b);
  auto apply = [](C x, C y) { return convert<O>(binary_value<kOp>(x, y)); };
  using Mode = typename OperandLoader<T>::Mode;
  const T* pa = load_a.data;
  const T* pb = load_b.data;
  // Specialized loops for the common layouts (contiguous with contiguous, or with a scalar).
  if (load_a.mode == Mode::Flat && load_b.mode == Mode::Flat) {
    parallel_for(n, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) out[i] = apply(convert<C>(pa[i]), convert<C>(pb[i]));
    });
  } else if (load_a.mode == Mode::Flat && load_b.mode == Mode::Scalar) {
    C sb = load_b.scalar;
    parallel_for(n, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) out[i] = apply(convert<C>(pa[i]), sb);
    });
  } else if (load_a.mode == Mode::Scalar && load_b.mode == Mode::Flat) {
    C sa = load_a.scalar;
    parallel_for(n, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) out[i] = apply(sa, convert<C>(pb[i]));
    });
  } else {
    binary_rows(load_a, load_b, out, n, apply);
  }
}

}  // namespace

void unary(UnaryOp op, DType dtype, const void* x, const StridedView& x_view, void* out, int64_t n) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    dispatch_unary_op(op, [&](auto op_tag) {
      constexpr UnaryOp kOp = decltype(op_tag)::value;
      if constexpr (std::is_integral_v<T> && !unary_accepts_integers(kOp)) {
        return;  // rejected by the front-end
      } else {
        unary_typed<kOp, T>(static_cast<const T*>(x), x_view, static_cast<T*>(out), n);
      }
    });
  });
}

void binary(BinaryOp op, DType dtype, const ElementwiseOperand& a, const ElementwiseOperand& b, void* out,
            int64_t n) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    dispatch_binary_op(op, [&](auto op_tag) { binary_typed<decltype(op_tag)::value, T>(a, b, out, n); });
  });
}

void where(const ElementwiseOperand& cond, DType dtype, const ElementwiseOperand& a, const ElementwiseOperand& b,
           void* out, int64_t n) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    OperandLoader<uint8_t> load_cond = make_loader<uint8_t>(cond);
    OperandLoader<T> load_a = make_loader<T>(a), load_b = make_loader<T>(b);
    T* result = static_cast<T*>(out);
    parallel_for(n, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        result[i] = convert<T>(load_cond(i) != 0 ? load_a(i) : load_b(i));
    });
  });
}

void fill(DType dtype, void* out, double value, int64_t n) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    T v = convert<T>(value);
    T* result = static_cast<T*>(out);
    parallel_for(n, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) result[i] = v;
    });
  });
}

void arange(DType dtype, void* out, double start, double step, int64_t n) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* result = static_cast<T*>(out);
    parallel_for(n, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) result[i] = convert<T>(start + static_cast<double>(i) * step);
    });
  });
}

// ---- gradients ----

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
