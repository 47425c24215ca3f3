#include "runtime/cpu/elementwise.h"

#include <cstring>
#include <type_traits>

#include "runtime/cpu/parallel.h"

namespace wick::cpu {
namespace {

template <UnaryOp kOp, typename T>
void unary_typed(const T* x, const StridedView& x_view, T* out, int64_t n) {
  using C = compute_t<T>;
  if (view_is_flat(x_view)) {
    parallel_for(n, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) out[i] = convert<T>(unary_value<kOp>(convert<C>(x[i])));
    });
    return;
  }
  parallel_for(n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = convert<T>(unary_value<kOp>(convert<C>(x[x_view.offset_of(i)])));
  });
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
    parallel_for(n, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) out[i] = apply(load_a(i), load_b(i));
    });
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

}  // namespace wick::cpu
