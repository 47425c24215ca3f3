// Copies between tensors: any strides, any dtype, any device.
//
//   copy_into(dst_view, src);          // src broadcast to dst's shape, cast to dst's dtype
//   Tensor y = cast(x, DType::BF16);   // new contiguous tensor, round to nearest even
#pragma once

#include "runtime/tensor.h"

namespace wick {

// Writes src (broadcast to dst.shape(), converted to dst.dtype()) into dst, which may be a
// strided view. Devices may differ; cross-device copies go through a contiguous staging tensor.
void copy_into(const Tensor& dst, const Tensor& src);
// A new contiguous tensor of `dtype` on x's device.
Tensor cast(const Tensor& x, DType dtype);

}  // namespace wick
