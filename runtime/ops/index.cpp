#include "runtime/ops/index.h"

#include "runtime/cpu/index.h"
#include "runtime/cuda/cuda_api.h"
#include "runtime/cuda/index.h"
#include "runtime/ops/copy.h"

namespace wick {
namespace {

void check_same_device(const Tensor& a, const Tensor& b, const char* op) {
  WICK_CHECK(a.device() == b.device(), op, ": tensors on different devices: ", a.describe(), " and ", b.describe());
}

// The index tensor as contiguous int64 on its own device.
Tensor indices_as_i64(const Tensor& index, const char* op) {
  WICK_CHECK(index.dtype() == DType::I32 || index.dtype() == DType::I64, op, ": index must be i32 or i64, got ",
             index.describe());
  if (index.dtype() == DType::I64 && index.is_contiguous()) return index;
  return cast(index, DType::I64);
}

// CPU only: every index in [0, extent), else throw naming the op and the bad index.
void check_index_range(const Tensor& index64, int64_t extent, int64_t axis, const char* op) {
  if (!index64.device().is_cpu()) return;  // CUDA kernels clamp instead (see index.h)
  const int64_t* values = index64.data_as<int64_t>();
  for (int64_t i = 0; i < index64.numel(); ++i)
    WICK_CHECK(values[i] >= 0 && values[i] < extent, op, ": index ", values[i], " is out of range for axis ", axis,
               " of extent ", extent);
}

}  // namespace

Tensor index_select(const Tensor& x, int64_t axis, const Tensor& index) {
  const char* op = "index_select";
  WICK_CHECK(x.dim() >= 1, op, ": x must have at least one axis, got ", x.describe());
  WICK_CHECK(index.dim() <= 1, op, ": index must be 1-d, got ", index.describe());
  check_same_device(x, index, op);
  int64_t a = normalize_axis(axis, x.dim(), op);
  Tensor index64 = indices_as_i64(index, op);
  int64_t extent = x.size(a), n_index = index64.numel();
  check_index_range(index64, extent, a, op);
  Shape out_shape = x.shape();
  out_shape[a] = n_index;
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.device());
  if (out.numel() == 0) return out;
  WICK_CHECK(extent > 0, op, ": cannot select from an empty axis ", a, " of ", x.describe());
  Tensor source = x.contiguous();
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < a; ++d) outer *= x.size(d);
  for (int64_t d = a + 1; d < x.dim(); ++d) inner *= x.size(d);
  if (x.device().is_cpu()) {
    cpu::index_select(out.data(), source.data(), dtype_size(x.dtype()), index64.data_as<int64_t>(), n_index, outer,
                      extent, inner);
  } else {
    cuda::set_device(x.device().index);
    cuda::index_select(out.data(), source.data(), dtype_size(x.dtype()), index64.data_as<int64_t>(), n_index, outer,
                       extent, inner, current_stream(x.device()).handle);
  }
  return out;
}

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  WICK_CHECK(weight.dim() == 2, "embedding: weight must be [V, D], got ", weight.describe());
  WICK_CHECK(ids.dtype() == DType::I32 || ids.dtype() == DType::I64, "embedding: ids must be i32 or i64, got ",
             ids.describe());
  check_same_device(weight, ids, "embedding");
  Tensor index64 = indices_as_i64(ids, "embedding");
  check_index_range(index64, weight.size(0), 0, "embedding");
  Tensor rows = index_select(weight, 0, index64.reshape({index64.numel()}));
  Shape out_shape = ids.shape();
  out_shape.push_back(weight.size(1));
  return rows.view(out_shape);
}

Tensor gather(const Tensor& x, int64_t axis, const Tensor& index) {
  const char* op = "gather";
  check_same_device(x, index, op);
  WICK_CHECK(index.dim() == x.dim(), op, ": index ", index.describe(), " must have the rank of x ", x.describe());
  WICK_CHECK(x.dim() >= 1, op, ": x must have at least one axis, got ", x.describe());
  int64_t a = normalize_axis(axis, x.dim(), op);
  for (int64_t d = 0; d < x.dim(); ++d)
    WICK_CHECK(d == a || index.size(d) <= x.size(d), op, ": index ", index.describe(), " is larger than x ",
               x.describe(), " on axis ", d);
  Tensor index64 = indices_as_i64(index, op);
  int64_t extent = x.size(a);
  check_index_range(index64, extent, a, op);
  Tensor out = Tensor::empty(index.shape(), x.dtype(), x.device());
  int64_t n = out.numel();
  if (n == 0) return out;
  WICK_CHECK(extent > 0, op, ": cannot gather from the empty axis ", a, " of ", x.describe());
  Strides x_strides = x.strides();
  int64_t axis_stride = x_strides[a];
  x_strides[a] = 0;
  StridedView x_view = make_strided_view(index.shape(), x_strides, op);
  if (x.device().is_cpu()) {
    cpu::gather(out.data(), x.data(), dtype_size(x.dtype()), x_view, axis_stride, index64.data_as<int64_t>(), n);
  } else {
    cuda::set_device(x.device().index);
    cuda::gather(out.data(), x.data(), dtype_size(x.dtype()), x_view, axis_stride, extent, index64.data_as<int64_t>(),
                 n, current_stream(x.device()).handle);
  }
  return out;
}

Tensor scatter_add(const Tensor& x, int64_t axis, const Tensor& index, const Tensor& src) {
  const char* op = "scatter_add";
  check_same_device(x, index, op);
  check_same_device(x, src, op);
  WICK_CHECK(x.dtype() != DType::U8 && x.dtype() != DType::I8, op, ": unsupported dtype ", dtype_name(x.dtype()),
             " (use a floating dtype, i32 or i64)");
  WICK_CHECK(index.dim() == x.dim() && src.dim() == x.dim(), op, ": x ", x.describe(), ", index ", index.describe(),
             " and src ", src.describe(), " must have the same rank");
  WICK_CHECK(x.dim() >= 1, op, ": x must have at least one axis, got ", x.describe());
  int64_t a = normalize_axis(axis, x.dim(), op);
  for (int64_t d = 0; d < x.dim(); ++d) {
    WICK_CHECK(index.size(d) <= src.size(d), op, ": index ", index.describe(), " is larger than src ",
               src.describe(), " on axis ", d);
    WICK_CHECK(d == a || index.size(d) <= x.size(d), op, ": index ", index.describe(), " is larger than x ",
               x.describe(), " on axis ", d);
  }
  Tensor index64 = indices_as_i64(index, op);
  check_index_range(index64, x.size(a), a, op);
  // 16-bit floats accumulate in an f32 copy: atomics and repeated adds in bf16 would lose the sum.
  DType work = (x.dtype() == DType::BF16 || x.dtype() == DType::F16) ? DType::F32 : x.dtype();
  Tensor out = cast(x, work);  // a fresh contiguous copy
  int64_t n = index64.numel();
  WICK_CHECK(n == 0 || x.size(a) > 0, op, ": cannot scatter into the empty axis ", a, " of ", x.describe());
  if (n > 0) {
    Tensor source = src.dtype() == work ? src : cast(src, work);
    Strides out_strides = out.strides();
    int64_t axis_stride = out_strides[a];
    out_strides[a] = 0;
    StridedView out_view = make_strided_view(index.shape(), out_strides, op);
    StridedView src_view = make_strided_view(index.shape(), source.strides(), op);
    if (x.device().is_cpu()) {
      cpu::scatter_add(out.data(), work, out_view, axis_stride, index64.data_as<int64_t>(), source.data(), src_view,
                       n);
    } else {
      cuda::set_device(x.device().index);
      cuda::scatter_add(out.data(), work, out_view, axis_stride, x.size(a), index64.data_as<int64_t>(), source.data(),
                        src_view, n, current_stream(x.device()).handle);
    }
  }
  return work == x.dtype() ? out : cast(out, x.dtype());
}

Tensor index_add(const Tensor& x, int64_t axis, const Tensor& index, const Tensor& src) {
  const char* op = "index_add";
  check_same_device(x, index, op);
  check_same_device(x, src, op);
  WICK_CHECK(x.dtype() != DType::U8 && x.dtype() != DType::I8, op, ": unsupported dtype ", dtype_name(x.dtype()),
             " (use a floating dtype, i32 or i64)");
  WICK_CHECK(x.dim() >= 1, op, ": x must have at least one axis, got ", x.describe());
  WICK_CHECK(index.dim() <= 1, op, ": index must be 1-d, got ", index.describe());
  int64_t a = normalize_axis(axis, x.dim(), op);
  Tensor index64 = indices_as_i64(index, op);
  int64_t n_index = index64.numel(), extent = x.size(a);
  bool shapes_match = src.dim() == x.dim();
  for (int64_t d = 0; shapes_match && d < x.dim(); ++d) shapes_match = src.size(d) == (d == a ? n_index : x.size(d));
  WICK_CHECK(shapes_match, op, ": src ", src.describe(), " must have the shape of x ", x.describe(), " with extent ",
             n_index, " (the index length) on axis ", a);
  check_index_range(index64, extent, a, op);
  DType work = (x.dtype() == DType::BF16 || x.dtype() == DType::F16) ? DType::F32 : x.dtype();
  Tensor out = cast(x, work);  // a fresh contiguous copy
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < a; ++d) outer *= x.size(d);
  for (int64_t d = a + 1; d < x.dim(); ++d) inner *= x.size(d);
  if (src.numel() > 0) {
    WICK_CHECK(extent > 0, op, ": cannot add into the empty axis ", a, " of ", x.describe());
    Tensor source = src.dtype() == work && src.is_contiguous() ? src : cast(src, work);
    if (x.device().is_cpu()) {
      cpu::index_add(out.data(), work, source.data(), index64.data_as<int64_t>(), n_index, outer, extent, inner);
    } else {
      cuda::set_device(x.device().index);
      cuda::index_add(out.data(), work, source.data(), index64.data_as<int64_t>(), n_index, outer, extent, inner,
                      current_stream(x.device()).handle);
    }
  }
  return work == x.dtype() ? out : cast(out, x.dtype());
}

}  // namespace wick
