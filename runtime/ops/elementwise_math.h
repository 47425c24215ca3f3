// Per-element math shared by the CPU and CUDA elementwise kernels, so both backends compute the
// same function, and the activations' derivatives. C++17-clean (included from .cu files); no
// Tensor here.
//
//   float y = unary_value<UnaryOp::GeluTanh>(x);          // in the compute type (f32 for 16-bit)
//   float dy_dx = unary_derivative<UnaryOp::GeluTanh>(x);
//   bool lt = binary_value<BinaryOp::Lt>(a, b);
//   OperandLoader<bf16> load = make_loader<bf16>(operand);  float v = load(i);
//
// Integer rules (also stated in runtime/ops/elementwise.h): add/sub/mul/neg/square wrap around
// (two's complement), division truncates toward zero, x / 0 == 0, pow with a negative exponent
// is 0 unless the base is 1 or -1.
#pragma once

#include <math.h>

#include <cstdint>
#include <limits>
#include <type_traits>

#include "runtime/dtype.h"
#include "runtime/kernel_args.h"

namespace wick {

enum class UnaryOp : uint8_t {
  Neg, Abs, Exp, Log, Sqrt, Rsqrt, Square, Sin, Cos, Tanh, Sigmoid, Relu, Silu, Gelu, GeluTanh
};
enum class BinaryOp : uint8_t { Add, Sub, Mul, Div, Pow, Maximum, Minimum, Eq, Ne, Lt, Le, Gt, Ge };

// neg, abs, square and relu are defined on integers; the rest need a floating dtype.
constexpr bool unary_accepts_integers(UnaryOp op) {
  return op == UnaryOp::Neg || op == UnaryOp::Abs || op == UnaryOp::Square || op == UnaryOp::Relu;
}
// Comparisons produce u8 (0 or 1).
constexpr bool is_comparison(BinaryOp op) { return static_cast<int>(op) >= static_cast<int>(BinaryOp::Eq); }

// One input of a binary/where kernel: a strided tensor, or (data == nullptr) a scalar used for
// every element.
struct ElementwiseOperand {
  const void* data = nullptr;
  StridedView view;
  double scalar = 0.0;
};

WICK_HD bool view_is_flat(const StridedView& view) {
  return view.rank == 0 || (view.rank == 1 && view.strides[0] == 1);
}

namespace math {
WICK_HD float exp(float x) { return ::expf(x); }
WICK_HD double exp(double x) { return ::exp(x); }
WICK_HD float log(float x) { return ::logf(x); }
WICK_HD double log(double x) { return ::log(x); }
WICK_HD float sqrt(float x) { return ::sqrtf(x); }
WICK_HD double sqrt(double x) { return ::sqrt(x); }
WICK_HD float sin(float x) { return ::sinf(x); }
WICK_HD double sin(double x) { return ::sin(x); }
WICK_HD float cos(float x) { return ::cosf(x); }
WICK_HD double cos(double x) { return ::cos(x); }
WICK_HD float tanh(float x) { return ::tanhf(x); }
WICK_HD double tanh(double x) { return ::tanh(x); }
WICK_HD float erf(float x) { return ::erff(x); }
WICK_HD double erf(double x) { return ::erf(x); }
WICK_HD float pow(float x, float y) { return ::powf(x, y); }
WICK_HD double pow(double x, double y) { return ::pow(x, y); }
WICK_HD float fabs(float x) { return ::fabsf(x); }
WICK_HD double fabs(double x) { return ::fabs(x); }

template <typename C>
WICK_HD bool is_nan(C x) {
  if constexpr (std::is_floating_point_v<C>)
    return x != x;
  else
    return false;
}
// NaN-propagating maximum/minimum (like torch.maximum).
template <typename C>
WICK_HD C maximum(C a, C b) {
  if (is_nan(a)) return a;
  if (is_nan(b)) return b;
  return a > b ? a : b;
}
template <typename C>
WICK_HD C minimum(C a, C b) {
  if (is_nan(a)) return a;
  if (is_nan(b)) return b;
  return a < b ? a : b;
}

// Two's-complement wrapping integer arithmetic (no signed-overflow UB).
template <typename T>
WICK_HD T wrap_add(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
}
template <typename T>
WICK_HD T wrap_sub(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) - static_cast<U>(b)));
}
template <typename T>
WICK_HD T wrap_mul(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
}
}  // namespace math

// y = op(x) in the compute type C (float for f32/bf16/f16, double for f64, the integer itself).
template <UnaryOp kOp, typename C>
WICK_HD C unary_value(C x) {
  if constexpr (std::is_integral_v<C>) {
    if constexpr (kOp == UnaryOp::Neg) {
      return math::wrap_sub(C(0), x);
    } else if constexpr (kOp == UnaryOp::Square) {
      return math::wrap_mul(x, x);
    } else if constexpr ((kOp == UnaryOp::Abs || kOp == UnaryOp::Relu) && std::is_signed_v<C>) {
      if (x >= C(0)) return x;
      return kOp == UnaryOp::Abs ? math::wrap_sub(C(0), x) : C(0);
    } else {
      return x;  // abs/relu of unsigned; float-only ops are rejected by the front-end
    }
  } else {
    const C one = C(1), half = C(0.5);
    if constexpr (kOp == UnaryOp::Neg) return -x;
    else if constexpr (kOp == UnaryOp::Abs) return math::fabs(x);
    else if constexpr (kOp == UnaryOp::Exp) return math::exp(x);
    else if constexpr (kOp == UnaryOp::Log) return math::log(x);
    else if constexpr (kOp == UnaryOp::Sqrt) return math::sqrt(x);
    else if constexpr (kOp == UnaryOp::Rsqrt) return one / math::sqrt(x);
    else if constexpr (kOp == UnaryOp::Square) return x * x;
    else if constexpr (kOp == UnaryOp::Sin) return math::sin(x);
    else if constexpr (kOp == UnaryOp::Cos) return math::cos(x);
    else if constexpr (kOp == UnaryOp::Tanh) return math::tanh(x);
    else if constexpr (kOp == UnaryOp::Sigmoid) return one / (one + math::exp(-x));
    else if constexpr (kOp == UnaryOp::Relu) return x < C(0) ? C(0) : x;  // NaN stays NaN
    else if constexpr (kOp == UnaryOp::Silu) return x / (one + math::exp(-x));
    else if constexpr (kOp == UnaryOp::Gelu) return half * x * (one + math::erf(x * C(0.70710678118654752440)));
    else {
      // GeluTanh: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
      C inner = C(0.79788456080286535588) * (x + C(0.044715) * x * x * x);
      return half * x * (one + math::tanh(inner));
    }
  }
}

// op(a, b) in the compute type; comparisons return bool.
template <BinaryOp kOp, typename C>
WICK_HD auto binary_value(C a, C b) {
  if constexpr (kOp == BinaryOp::Eq) return a == b;
  else if constexpr (kOp == BinaryOp::Ne) return a != b;
  else if constexpr (kOp == BinaryOp::Lt) return a < b;
  else if constexpr (kOp == BinaryOp::Le) return a <= b;
  else if constexpr (kOp == BinaryOp::Gt) return a > b;
  else if constexpr (kOp == BinaryOp::Ge) return a >= b;
  else if constexpr (kOp == BinaryOp::Maximum) return math::maximum(a, b);
  else if constexpr (kOp == BinaryOp::Minimum) return math::minimum(a, b);
  else if constexpr (std::is_integral_v<C>) {
    if constexpr (kOp == BinaryOp::Add) return math::wrap_add(a, b);
    else if constexpr (kOp == BinaryOp::Sub) return math::wrap_sub(a, b);
    else if constexpr (kOp == BinaryOp::Mul) return math::wrap_mul(a, b);
    else if constexpr (kOp == BinaryOp::Div) {
      if (b == C(0)) return C(0);
      if constexpr (std::is_signed_v<C>) {
        if (b == C(-1)) return math::wrap_sub(C(0), a);  // avoids min / -1 overflow
      }
      return static_cast<C>(a / b);
    } else {
      // Pow by squaring, wrapping; negative exponents give 0 except for bases 1 and -1.
      if constexpr (std::is_signed_v<C>) {
        if (b < C(0)) {
          if (a == C(1)) return C(1);
          if (a == C(-1)) return (b & C(1)) ? C(-1) : C(1);
          return C(0);
        }
      }
      C result = C(1), base = a;
      for (C e = b; e > C(0); e = static_cast<C>(e >> 1)) {
        if (e & C(1)) result = math::wrap_mul(result, base);
        base = math::wrap_mul(base, base);
      }
      return result;
    }
  } else {
    if constexpr (kOp == BinaryOp::Add) return a + b;
    else if constexpr (kOp == BinaryOp::Sub) return a - b;
    else if constexpr (kOp == BinaryOp::Mul) return a * b;
    else if constexpr (kOp == BinaryOp::Div) return a / b;
    else return math::pow(a, b);
  }
}

// Reads element i of an operand in the compute type; `mode` is decided once on the host.
template <typename T>
struct OperandLoader {
  enum Mode : int { Flat = 0, Strided = 1, Scalar = 2 };
  const T* data = nullptr;
  StridedView view;
  compute_t<T> scalar{};
  int mode = Flat;

  WICK_HD compute_t<T> operator()(int64_t i) const {
    if (mode == Flat) return convert<compute_t<T>>(data[i]);
    if (mode == Strided) return convert<compute_t<T>>(data[view.offset_of(i)]);
    return scalar;
  }
};

template <typename T>
inline OperandLoader<T> make_loader(const ElementwiseOperand& operand) {
  OperandLoader<T> loader;
  loader.data = static_cast<const T*>(operand.data);
  loader.view = operand.view;
  loader.scalar = static_cast<compute_t<T>>(operand.scalar);
  loader.mode = operand.data == nullptr ? OperandLoader<T>::Scalar
                : view_is_flat(operand.view) ? OperandLoader<T>::Flat
                                             : OperandLoader<T>::Strided;
  return loader;
}

// Calls fn(std::integral_constant<UnaryOp, op>{}) so kernels get the op as a template argument.
template <typename Fn>
void dispatch_unary_op(UnaryOp op, Fn&& fn) {
#define WICK_UNARY_CASE(name) \
  case UnaryOp::name: fn(std::integral_constant<UnaryOp, UnaryOp::name>{}); return;
  switch (op) {
    WICK_UNARY_CASE(Neg) WICK_UNARY_CASE(Abs) WICK_UNARY_CASE(Exp) WICK_UNARY_CASE(Log)
    WICK_UNARY_CASE(Sqrt) WICK_UNARY_CASE(Rsqrt) WICK_UNARY_CASE(Square) WICK_UNARY_CASE(Sin)
    WICK_UNARY_CASE(Cos) WICK_UNARY_CASE(Tanh) WICK_UNARY_CASE(Sigmoid) WICK_UNARY_CASE(Relu)
    WICK_UNARY_CASE(Silu) WICK_UNARY_CASE(Gelu) WICK_UNARY_CASE(GeluTanh)
  }
#undef WICK_UNARY_CASE
}

template <typename Fn>
void dispatch_binary_op(BinaryOp op, Fn&& fn) {
#define WICK_BINARY_CASE(name) \
  case BinaryOp::name: fn(std::integral_constant<BinaryOp, BinaryOp::name>{}); return;
  switch (op) {
    WICK_BINARY_CASE(Add) WICK_BINARY_CASE(Sub) WICK_BINARY_CASE(Mul) WICK_BINARY_CASE(Div)
    WICK_BINARY_CASE(Pow) WICK_BINARY_CASE(Maximum) WICK_BINARY_CASE(Minimum) WICK_BINARY_CASE(Eq)
    WICK_BINARY_CASE(Ne) WICK_BINARY_CASE(Lt) WICK_BINARY_CASE(Le) WICK_BINARY_CASE(Gt) WICK_BINARY_CASE(Ge)
  }
#undef WICK_BINARY_CASE
}

// ---- gradients ----
// Per-element derivatives shared by the CPU and CUDA activation backward kernels (C++17-clean,
// included from .cu files). unary_derivative<kOp>(x) is d op(x) / dx in the compute type.
// Silu, Gelu and GeluTanh (the ops unary_backward in runtime/ops/elementwise.h accepts).
constexpr bool has_unary_backward_kernel(UnaryOp op) {
  return op == UnaryOp::Silu || op == UnaryOp::Gelu || op == UnaryOp::GeluTanh;
}

template <UnaryOp kOp, typename C>
WICK_HD C unary_derivative(C x) {
  const C one = C(1), half = C(0.5);
  if constexpr (kOp == UnaryOp::Silu) {
    C s = one / (one + math::exp(-x));
    return s * (one + x * (one - s));
  } else if constexpr (kOp == UnaryOp::Gelu) {
    // Phi(x) + x phi(x); 1/sqrt(2) and 1/sqrt(2 pi)
    C cdf = half * (one + math::erf(x * C(0.70710678118654752440)));
    C pdf = C(0.39894228040143267794) * math::exp(-half * x * x);
    return cdf + x * pdf;
  } else {
    // GeluTanh, as torch: 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 * 0.044715 x^2), t = tanh(inner)
    const C k = C(0.79788456080286535588), kappa = C(0.044715);
    C x_sq = x * x;
    C t = math::tanh(k * (x + kappa * x_sq * x));
    return half * (one + t) + half * x * (one - t * t) * k * (one + C(3) * kappa * x_sq);
  }
}

template <typename Fn>
void dispatch_unary_backward_op(UnaryOp op, Fn&& fn) {
  switch (op) {
    case UnaryOp::Silu: fn(std::integral_constant<UnaryOp, UnaryOp::Silu>{}); return;
    case UnaryOp::Gelu: fn(std::integral_constant<UnaryOp, UnaryOp::Gelu>{}); return;
    case UnaryOp::GeluTanh: fn(std::integral_constant<UnaryOp, UnaryOp::GeluTanh>{}); return;
    default: return;  // rejected by the front-end
  }
}

}  // namespace wick
