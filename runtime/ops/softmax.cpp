#include "runtime/ops/softmax.h"

#include "runtime/cpu/softmax.h"
#include "runtime/cuda/cuda_api.h"
#include "runtime/cuda/softmax.h"
#include "runtime/error.h"
#include "runtime/ops/copy.h"
#include "runtime/shape.h"

namespace wick {
namespace {

Tensor softmax_along(bool log, const Tensor& x, int64_t axis) {
  const char* name = log ? "log_softmax" : "softmax";
  WICK_CHECK(x.defined(), name, ": undefined tensor");
  WICK_CHECK(is_floating(x.dtype()), name, ": expected a floating-point tensor, got ", x.describe(), " (dtype ",
             dtype_name(x.dtype()), ")");
  if (x.dim() == 0) {
    WICK_CHECK(axis == 0 || axis == -1, name, ": axis ", axis, " is out of range for ", x.describe(), " (rank 0)");
    return softmax_along(log, x.reshape({1}), 0).reshape({});
  }
  WICK_CHECK(axis >= -x.dim() && axis < x.dim(), name, ": axis ", axis, " is out of range for ", x.describe(),
             " (rank ", x.dim(), ")");
  int64_t a = normalize_axis(axis, x.dim(), name);
  int64_t last = x.dim() - 1;
  Tensor rows = x.transpose(a, last).contiguous();  // the softmax axis last
  Tensor out = Tensor::empty(rows.shape(), x.dtype(), x.device());
  int64_t row_length = rows.shape()[last];
  int64_t n_rows = row_length == 0 ? 0 : rows.numel() / row_length;
  Device device = x.device();
  if (n_rows > 0) {
    if (device.is_cpu()) {
      cpu::softmax_rows(log, x.dtype(), rows.data(), out.data(), n_rows, row_length);
    } else {
      cuda::set_device(device.index);
      cuda::softmax_rows(log, x.dtype(), rows.data(), out.data(), n_rows, row_length, current_stream(device).handle);
    }
  }
  return a == last ? out : out.transpose(a, last).contiguous();
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t axis) { return softmax_along(false, x, axis); }
Tensor log_softmax(const Tensor& x, int64_t axis) { return softmax_along(true, x, axis); }

// ---- gradients ----

Tensor softmax_backward(const Tensor& grad_y, const Tensor& y, int64_t axis) {
  const char* op = "softmax_backward";
  WICK_CHECK(grad_y.defined() && y.defined(), op, ": undefined tensor");
  WICK_CHECK(is_floating(grad_y.dtype()) && is_floating(y.dtype()), op, ": floating dtypes only, got grad_y ",
             grad_y.describe(), " and y ", y.describe());
  WICK_CHECK(grad_y.shape() == y.shape(), op, ": grad_y ", grad_y.describe(), " and y ", y.describe(),
             " differ in shape");
  WICK_CHECK(grad_y.device() == y.device(), op, ": grad_y ", grad_y.describe(), " and y ", y.describe(),
             " on different devices");
  if (y.dim() == 0) {
    WICK_CHECK(axis == 0 || axis == -1, op, ": axis ", axis, " is out of range for ", y.describe(), " (rank 0)");
    return softmax_backward(grad_y.reshape({1}), y.reshape({1}), 0).reshape({});
  }
  int64_t a = normalize_axis(axis, y.dim(), op);
  int64_t last = y.dim() - 1;
  DType dtype = promote_types(grad_y.dtype(), y.dtype());
  // The softmax axis last, contiguous, in the result dtype.
  auto as_rows = [&](const Tensor& t) {
    Tensor moved = a == last ? t : t.transpose(a, last);
    return moved.dtype() == dtype ? moved.contiguous() : cast(moved, dtype);
  };
  Tensor g_rows = as_rows(grad_y), y_rows = as_rows(y);
  Tensor out = Tensor::empty(y_rows.shape(), dtype, y.device());
  int64_t row_length = y_rows.shape()[static_cast<size_t>(last)];
  int64_t n_rows = row_length == 0 ? 0 : y_rows.numel() / row_length;
  if (n_rows > 0) {
    Device device = y.device();
    if (device.is_cpu()) {
      cpu::softmax_backward_rows(dtype, g_rows.data(), y_rows.data(), out.data(), n_rows, row_length);
    } else {
      cuda::set_device(device.index);
      cuda::softmax_backward_rows(dtype, g_rows.data(), y_rows.data(), out.data(), n_rows, row_length,
                                  current_stream(device).handle);
    }
  }
  return a == last ? out : out.transpose(a, last).contiguous();
}

}  // namespace wick
