#include "runtime/ops/elementwise.h"

#include <cmath>
#include <limits>

#include "runtime/cpu/elementwise.h"
#include "runtime/cuda/cuda_api.h"
#include "runtime/cuda/elementwise.h"
#include "runtime/ops/elementwise_math.h"

namespace wick {
namespace {

void check_defined(const Tensor& x, const char* op) { WICK_CHECK(x.defined(), op, ": undefined tensor"); }

void check_same_device(const Tensor& a, const Tensor& b, const char* op) {
  WICK_CHECK(a.device() == b.device(), op, ": tensors are on different devices: ", a.describe(), " and ",
             b.describe());
}

// Coalesces out (contiguous) with the operands and returns their views; operands must already have
// out's shape (expanded).
std::vector<StridedView> coalesced_views(const Tensor& out, const std::vector<Tensor>& operands, const char* op) {
  Shape shape = out.shape();
  std::vector<Strides> strides{out.strides()};
  for (const Tensor& t : operands) strides.push_back(t.strides());
  std::vector<Strides*> pointers;
  for (Strides& s : strides) pointers.push_back(&s);
  coalesce_axes(shape, pointers);
  std::vector<StridedView> views;
  for (size_t k = 1; k < strides.size(); ++k) views.push_back(make_strided_view(shape, strides[k], op));
  return views;
}

ElementwiseOperand tensor_operand(const Tensor& t, const StridedView& view) {
  ElementwiseOperand operand;
  operand.data = t.data();
  operand.view = view;
  return operand;
}

ElementwiseOperand scalar_operand(double value) {
  ElementwiseOperand operand;
  operand.scalar = value;
  return operand;
}

void launch_binary(BinaryOp op, DType dtype, const ElementwiseOperand& a, const ElementwiseOperand& b,
                   const Tensor& out) {
  Device device = out.device();
  if (device.is_cpu()) {
    cpu::binary(op, dtype, a, b, out.data(), out.numel());
  } else {
    cuda::set_device(device.index);
    cuda::binary(op, dtype, a, b, out.data(), out.numel(), current_stream(device).handle);
  }
}

// Whether `value` is representable in integer dtype `dtype`.
bool fits_integer(DType dtype, double value) {
  return dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    return value >= static_cast<double>(std::numeric_limits<T>::lowest()) &&
           value <= static_cast<double>(std::numeric_limits<T>::max());
  });
}

}  // namespace

const char* unary_op_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::Neg: return "neg";
    case UnaryOp::Abs: return "abs";
    case UnaryOp::Exp: return "exp";
    case UnaryOp::Log: return "log";
    case UnaryOp::Sqrt: return "sqrt";
    case UnaryOp::Rsqrt: return "rsqrt";
    case UnaryOp::Square: return "square";
    case UnaryOp::Sin: return "sin";
    case UnaryOp::Cos: return "cos";
    case UnaryOp::Tanh: return "tanh";
    case UnaryOp::Sigmoid: return "sigmoid";
    case UnaryOp::Relu: return "relu";
    case UnaryOp::Silu: return "silu";
    case UnaryOp::Gelu: return "gelu";
    case UnaryOp::GeluTanh: return "gelu_tanh";
  }
  return "unary";
}

const char* binary_op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return "add";
    case BinaryOp::Sub: return "sub";
    case BinaryOp::Mul: return "mul";
    case BinaryOp::Div: return "div";
    case BinaryOp::Pow: return "pow";
    case BinaryOp::Maximum: return "maximum";
    case BinaryOp::Minimum: return "minimum";
    case BinaryOp::Eq: return "eq";
    case BinaryOp::Ne: return "ne";
    case BinaryOp::Lt: return "lt";
    case BinaryOp::Le: return "le";
    case BinaryOp::Gt: return "gt";
    case BinaryOp::Ge: return "ge";
  }
  return "binary";
}

// ---- unary ----

Tensor unary(UnaryOp op, const Tensor& x) {
  const char* name = unary_op_name(op);
  check_defined(x, name);
  WICK_CHECK(is_floating(x.dtype()) || unary_accepts_integers(op), name,
             ": expected a floating-point tensor (f32, f64, bf16, f16), got ", x.describe(), " (dtype ",
             dtype_name(x.dtype()), ")");
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (out.numel() == 0) return out;
  StridedView x_view = coalesced_views(out, {x}, name)[0];
  if (x.device().is_cpu()) {
    cpu::unary(op, x.dtype(), x.data(), x_view, out.data(), out.numel());
  } else {
    cuda::set_device(x.device().index);
    cuda::unary(op, x.dtype(), x.data(), x_view, out.data(), out.numel(), current_stream(x.device()).handle);
  }
  return out;
}

Tensor neg(const Tensor& x) { return unary(UnaryOp::Neg, x); }
Tensor abs(const Tensor& x) { return unary(UnaryOp::Abs, x); }
Tensor exp(const Tensor& x) { return unary(UnaryOp::Exp, x); }
Tensor log(const Tensor& x) { return unary(UnaryOp::Log, x); }
Tensor sqrt(const Tensor& x) { return unary(UnaryOp::Sqrt, x); }
Tensor rsqrt(const Tensor& x) { return unary(UnaryOp::Rsqrt, x); }
Tensor square(const Tensor& x) { return unary(UnaryOp::Square, x); }
Tensor sin(const Tensor& x) { return unary(UnaryOp::Sin, x); }
Tensor cos(const Tensor& x) { return unary(UnaryOp::Cos, x); }
Tensor tanh(const Tensor& x) { return unary(UnaryOp::Tanh, x); }
Tensor sigmoid(const Tensor& x) { return unary(UnaryOp::Sigmoid, x); }
Tensor relu(const Tensor& x) { return unary(UnaryOp::Relu, x); }
Tensor silu(const Tensor& x) { return unary(UnaryOp::Silu, x); }
Tensor gelu(const Tensor& x) { return unary(UnaryOp::Gelu, x); }
Tensor gelu_tanh(const Tensor& x) { return unary(UnaryOp::GeluTanh, x); }

// ---- binary ----

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = binary_op_name(op);
  check_defined(a, name);
  check_defined(b, name);
  check_same_device(a, b, name);
  Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  DType dtype = promote_types(a.dtype(), b.dtype());
  Tensor a_full = a.to(dtype).expand(shape), b_full = b.to(dtype).expand(shape);
  Tensor out = Tensor::empty(shape, is_comparison(op) ? DType::U8 : dtype, a.device());
  if (out.numel() == 0) return out;
  std::vector<StridedView> views = coalesced_views(out, {a_full, b_full}, name);
  launch_binary(op, dtype, tensor_operand(a_full, views[0]), tensor_operand(b_full, views[1]), out);
  return out;
}

Tensor binary(BinaryOp op, const Tensor& x, double scalar, bool scalar_first) {
  const char* name = binary_op_name(op);
  check_defined(x, name);
  Tensor source = x;
  if (is_integral(x.dtype())) {
    WICK_CHECK(std::isfinite(scalar) && std::nearbyint(scalar) == scalar, name, ": scalar ", scalar,
               " is not a whole number but the tensor is ", x.describe(), " (cast it to a float dtype first)");
    WICK_CHECK(std::fabs(scalar) < 9.2e18, name, ": scalar ", scalar, " is outside the i64 range");
    // A scalar outside x's range (u8 < 300): compute in i64, then wrap back into x's dtype.
    if (!fits_integer(x.dtype(), scalar)) source = x.to(DType::I64);
  }
  Tensor out = Tensor::empty(x.shape(), is_comparison(op) ? DType::U8 : source.dtype(), x.device());
  if (out.numel() == 0) return is_comparison(op) ? out : out.to(x.dtype());
  ElementwiseOperand tensor = tensor_operand(source, coalesced_views(out, {source}, name)[0]);
  ElementwiseOperand number = scalar_operand(scalar);
  if (scalar_first)
    launch_binary(op, source.dtype(), number, tensor, out);
  else
    launch_binary(op, source.dtype(), tensor, number, out);
  return is_comparison(op) ? out : out.to(x.dtype());
}

Tensor add(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Add, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Sub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Div, a, b); }
Tensor pow(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Pow, a, b); }
Tensor maximum(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Maximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Minimum, a, b); }
Tensor eq(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Ge, a, b); }

Tensor add(const Tensor& x, double scalar) { return binary(BinaryOp::Add, x, scalar); }
Tensor sub(const Tensor& x, double scalar) { return binary(BinaryOp::Sub, x, scalar); }
Tensor sub(double scalar, const Tensor& x) { return binary(BinaryOp::Sub, x, scalar, true); }
Tensor mul(const Tensor& x, double scalar) { return binary(BinaryOp::Mul, x, scalar); }
Tensor div(const Tensor& x, double scalar) { return binary(BinaryOp::Div, x, scalar); }
Tensor div(double scalar, const Tensor& x) { return binary(BinaryOp::Div, x, scalar, true); }
Tensor pow(const Tensor& x, double exponent) { return binary(BinaryOp::Pow, x, exponent); }
Tensor pow(double base, const Tensor& x) { return binary(BinaryOp::Pow, x, base, true); }
Tensor maximum(const Tensor& x, double scalar) { return binary(BinaryOp::Maximum, x, scalar); }
Tensor minimum(const Tensor& x, double scalar) { return binary(BinaryOp::Minimum, x, scalar); }
Tensor eq(const Tensor& x, double scalar) { return binary(BinaryOp::Eq, x, scalar); }
Tensor ne(const Tensor& x, double scalar) { return binary(BinaryOp::Ne, x, scalar); }
Tensor lt(const Tensor& x, double scalar) { return binary(BinaryOp::Lt, x, scalar); }
Tensor le(const Tensor& x, double scalar) { return binary(BinaryOp::Le, x, scalar); }
Tensor gt(const Tensor& x, double scalar) { return binary(BinaryOp::Gt, x, scalar); }
Tensor ge(const Tensor& x, double scalar) { return binary(BinaryOp::Ge, x, scalar); }

// ---- where ----

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_defined(cond, "where");
  check_defined(a, "where");
  check_defined(b, "where");
  check_same_device(cond, a, "where");
  check_same_device(a, b, "where");
  Shape shape = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  DType dtype = promote_types(a.dtype(), b.dtype());
  Tensor mask = cond.dtype() == DType::U8 ? cond : ne(cond, 0.0);
  Tensor mask_full = mask.expand(shape), a_full = a.to(dtype).expand(shape), b_full = b.to(dtype).expand(shape);
  Tensor out = Tensor::empty(shape, dtype, a.device());
  if (out.numel() == 0) return out;
  std::vector<StridedView> views = coalesced_views(out, {mask_full, a_full, b_full}, "where");
  ElementwiseOperand c = tensor_operand(mask_full, views[0]);
  ElementwiseOperand x = tensor_operand(a_full, views[1]), y = tensor_operand(b_full, views[2]);
  if (out.device().is_cpu()) {
    cpu::where(c, dtype, x, y, out.data(), out.numel());
  } else {
    cuda::set_device(out.device().index);
    cuda::where(c, dtype, x, y, out.data(), out.numel(), current_stream(out.device()).handle);
  }
  return out;
}

// ---- gradients ----

Tensor unary_backward(UnaryOp op, const Tensor& grad, const Tensor& x) {
  std::string name = std::string(unary_op_name(op)) + "_backward";
  WICK_CHECK(has_unary_backward_kernel(op), "unary_backward: no backward kernel for ", unary_op_name(op),
             " (only silu, gelu, gelu_tanh)");
  WICK_CHECK(grad.defined() && x.defined(), name, ": undefined tensor");
  WICK_CHECK(grad.device() == x.device(), name, ": tensors are on different devices: ", grad.describe(), " and ",
             x.describe());
  WICK_CHECK(grad.shape() == x.shape(), name, ": grad ", grad.describe(), " and x ", x.describe(),
             " must have the same shape");
  WICK_CHECK(grad.dtype() == x.dtype() && is_floating(x.dtype()), name,
             ": grad and x must share one floating dtype, got ", dtype_name(grad.dtype()), " and ",
             dtype_name(x.dtype()));
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (out.numel() == 0) return out;
  Tensor g = grad.contiguous(), xs = x.contiguous();
  if (x.device().is_cpu()) {
    cpu::unary_backward(op, x.dtype(), g.data(), xs.data(), out.data(), out.numel());
  } else {
    cuda::set_device(x.device().index);
    cuda::unary_backward(op, x.dtype(), g.data(), xs.data(), out.data(), out.numel(),
                         current_stream(x.device()).handle);
  }
  return out;
}

Tensor silu_backward(const Tensor& grad, const Tensor& x) { return unary_backward(UnaryOp::Silu, grad, x); }
Tensor gelu_backward(const Tensor& grad, const Tensor& x) { return unary_backward(UnaryOp::Gelu, grad, x); }
Tensor gelu_tanh_backward(const Tensor& grad, const Tensor& x) {
  return unary_backward(UnaryOp::GeluTanh, grad, x);
}
}  // namespace wick
