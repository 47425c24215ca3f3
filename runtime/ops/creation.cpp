#include "runtime/ops/creation.h"

#include <cmath>

#include "runtime/cpu/elementwise.h"
#include "runtime/cuda/cuda_api.h"
#include "runtime/cuda/elementwise.h"

namespace wick {

Tensor zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }
Tensor ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1.0, dtype, device); }

Tensor full(const Shape& shape, double value, DType dtype, Device device) {
  for (int64_t extent : shape) WICK_CHECK(extent >= 0, "full: negative extent in shape ", shape);
  Tensor out = Tensor::empty(shape, dtype, device);
  if (out.numel() == 0) return out;
  if (device.is_cpu()) {
    cpu::fill(dtype, out.data(), value, out.numel());
  } else {
    cuda::set_device(device.index);
    cuda::fill(dtype, out.data(), value, out.numel(), current_stream(device).handle);
  }
  return out;
}

Tensor arange(double start, double end, double step, DType dtype, Device device) {
  WICK_CHECK(std::isfinite(start) && std::isfinite(end) && std::isfinite(step), "arange: start ", start,
             ", end ", end, " and step ", step, " must be finite");
  WICK_CHECK(step != 0.0, "arange: step must not be zero");
  WICK_CHECK((end - start) * step >= 0.0, "arange: step ", step, " points away from end (start ", start,
             ", end ", end, ")");
  double count = std::ceil((end - start) / step);
  WICK_CHECK(count < 9.0e15, "arange: ", count, " elements is too many");
  int64_t n = static_cast<int64_t>(count);
  Tensor out = Tensor::empty({n}, dtype, device);
  if (n == 0) return out;
  if (device.is_cpu()) {
    cpu::arange(dtype, out.data(), start, step, n);
  } else {
    cuda::set_device(device.index);
    cuda::arange(dtype, out.data(), start, step, n, current_stream(device).handle);
  }
  return out;
}

Tensor zeros_like(const Tensor& x) { return full_like(x, 0.0); }
Tensor ones_like(const Tensor& x) { return full_like(x, 1.0); }

Tensor full_like(const Tensor& x, double value) {
  WICK_CHECK(x.defined(), "full_like: undefined tensor");
  return full(x.shape(), value, x.dtype(), x.device());
}

Tensor empty_like(const Tensor& x) {
  WICK_CHECK(x.defined(), "empty_like: undefined tensor");
  return Tensor::empty(x.shape(), x.dtype(), x.device());
}

}  // namespace wick
