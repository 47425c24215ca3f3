// Tensor creation: constant fills and ranges, on any device. (Random creation lives elsewhere.)
//
//   Tensor z = zeros({2, 3});                                   // f32 on the CPU
//   Tensor o = ones({4}, DType::BF16, Device::cuda(0));
//   Tensor f = full({2, 2}, -1.5, DType::F16);
//   Tensor r = arange(0, 10, 3, DType::I64);                     // [0, 3, 6, 9]
//   Tensor e = empty_like(x);  Tensor g = full_like(x, 2.0);     // x's shape, dtype, device
//
// All results are new contiguous tensors. Values are converted like Tensor::to (round to nearest
// even for 16-bit floats; truncation toward zero and saturation for integers).
#pragma once

#include "runtime/tensor.h"

namespace wick {

Tensor zeros(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
Tensor ones(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
// Every element equals `value` converted to dtype.
Tensor full(const Shape& shape, double value, DType dtype = DType::F32, Device device = Device::cpu());
// 1-d: start, start + step, ... while < end (step > 0) or > end (step < 0); element i is
// start + i * step computed in double, then converted. n = ceil((end - start) / step).
// step == 0, non-finite arguments, or a step whose sign points away from end are errors.
Tensor arange(double start, double end, double step = 1.0, DType dtype = DType::F32,
              Device device = Device::cpu());

// x's shape, dtype and device (x's values are not read).
Tensor zeros_like(const Tensor& x);
Tensor ones_like(const Tensor& x);
Tensor full_like(const Tensor& x, double value);
Tensor empty_like(const Tensor& x);  // uninitialized

}  // namespace wick
