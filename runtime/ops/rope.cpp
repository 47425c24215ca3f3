#include "runtime/ops/rope.h"

#include <algorithm>
#include <cmath>

#include "runtime/cpu/rope.h"
#include "runtime/cuda/cuda_api.h"
#include "runtime/cuda/rope.h"
#include "runtime/ops/copy.h"

namespace wick {

RopeTables rope_frequencies(const Tensor& positions, const std::vector<int64_t>& axes_dims, double theta,
                            DType table_dtype) {
  const char* op = "rope_frequencies";
  WICK_CHECK(positions.dim() >= 1, op, ": positions must be [..., n_axes], got ", positions.describe());
  int64_t n_axes = positions.size(-1);
  WICK_CHECK(n_axes == static_cast<int64_t>(axes_dims.size()), op, ": positions ", positions.describe(), " have ",
             n_axes, " axes but ", axes_dims.size(), " axis dims were given");
  WICK_CHECK(theta > 0, op, ": theta must be positive, got ", theta);
  WICK_CHECK(is_floating(table_dtype), op, ": table dtype must be floating, got ", dtype_name(table_dtype));
  int64_t half = 0;
  for (int64_t dim : axes_dims) {
    WICK_CHECK(dim > 0 && dim % 2 == 0, op, ": every axis dim must be positive and even, got ", dim);
    half += dim / 2;
  }
  std::vector<double> pos = positions.to_vector<double>();
  int64_t n_rows = positions.numel() / std::max<int64_t>(1, n_axes);
  std::vector<double> cos_values(static_cast<size_t>(n_rows * half)), sin_values(cos_values.size());
  for (int64_t row = 0; row < n_rows; ++row) {
    int64_t column = 0;
    for (int64_t k = 0; k < n_axes; ++k) {
      int64_t dim = axes_dims[static_cast<size_t>(k)];
      double p = pos[static_cast<size_t>(row * n_axes + k)];
      for (int64_t j = 0; j < dim / 2; ++j, ++column) {
        double omega = 1.0 / std::pow(theta, static_cast<double>(2 * j) / static_cast<double>(dim));
        double angle = p * omega;
        cos_values[static_cast<size_t>(row * half + column)] = std::cos(angle);
        sin_values[static_cast<size_t>(row * half + column)] = std::sin(angle);
      }
    }
  }
  Shape table_shape(positions.shape().begin(), positions.shape().end() - 1);
  table_shape.push_back(half);
  // Rounded on the host, so only table_dtype bytes travel to the device.
  return {Tensor::from_vector<double>(cos_values, table_shape).to(table_dtype).to(positions.device()),
          Tensor::from_vector<double>(sin_values, table_shape).to(table_dtype).to(positions.device())};
}

Tensor apply_rope(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  const char* op = "apply_rope";
  WICK_CHECK(is_floating(x.dtype()), op, ": x must be floating, got ", x.describe());
  WICK_CHECK(x.dim() >= 2, op, ": x must be [..., L, D], got ", x.describe());
  WICK_CHECK(x.device() == cos.device() && x.device() == sin.device(), op, ": x ", x.describe(), ", cos ",
             cos.describe(), " and sin ", sin.describe(), " must be on one device");
  int64_t d = x.size(-1);
  WICK_CHECK(d % 2 == 0, op, ": head dimension ", d, " of ", x.describe(), " must be even");
  WICK_CHECK(cos.shape() == sin.shape(), op, ": cos ", cos.describe(), " and sin ", sin.describe(),
             " differ in shape");
  WICK_CHECK(is_floating(cos.dtype()) && is_floating(sin.dtype()), op, ": cos/sin must be floating, got ",
             cos.describe());
  Shape table_shape(x.shape().begin(), x.shape().end() - 1);
  table_shape.push_back(d / 2);
  bool fits = cos.dim() <= static_cast<int64_t>(table_shape.size());
  for (int64_t i = 1; fits && i <= cos.dim(); ++i) {
    int64_t have = cos.size(-i), want = table_shape[table_shape.size() - i];
    fits = have == want || have == 1;
  }
  WICK_CHECK(fits && cos.size(-1) == d / 2, op, ": cos/sin ", cos.describe(), " do not broadcast to ", table_shape,
             " for x ", x.describe());
  DType table_dtype = x.dtype() == DType::F64 ? DType::F64 : DType::F32;
  Tensor c = cos.dtype() == table_dtype ? cos : cast(cos, table_dtype);
  Tensor s = sin.dtype() == table_dtype ? sin : cast(sin, table_dtype);
  c = c.expand(table_shape);
  s = s.expand(table_shape);
  // cos and sin must share strides for one table view; cast made both contiguous if either differs.
  if (c.strides() != s.strides()) {
    c = cast(cos, table_dtype).expand(table_shape);
    s = cast(sin, table_dtype).expand(table_shape);
  }
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  int64_t n_pairs = x.numel() / 2;
  if (n_pairs == 0) return out;
  StridedView x_view = strided_view(x, op);
  StridedView table_view = make_strided_view(table_shape, c.strides(), op);
  int64_t pair_stride = x.strides().back();
  if (x.device().is_cpu()) {
    cpu::apply_rope(out.data(), x.data(), x.dtype(), x_view, pair_stride, c.data(), s.data(), table_view, n_pairs);
  } else {
    cuda::set_device(x.device().index);
    cuda::apply_rope(out.data(), x.data(), x.dtype(), x_view, pair_stride, c.data(), s.data(), table_view, n_pairs,
                     current_stream(x.device()).handle);
  }
  return out;
}

}  // namespace wick
