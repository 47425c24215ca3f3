#include "runtime/ops/elementwise_backward.h"

#include "runtime/cpu/elementwise_backward.h"
#include "runtime/cuda/cuda_api.h"
#include "runtime/cuda/elementwise_backward.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/elementwise_backward_math.h"

namespace wick {

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
