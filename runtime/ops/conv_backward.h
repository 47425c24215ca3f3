// Gradients of 2-d convolution (runtime/ops/conv.h), for the autograd conv2d node.
//
//   Tensor y = conv2d(x, weight, bias, stride, padding, dilation, groups);
//   Tensor grad_x = conv2d_backward_input(grad_y, weight, x.shape(), stride, padding, dilation, groups);
//   Tensor grad_w = conv2d_backward_weight(grad_y, x, weight.shape(), stride, padding, dilation, groups);
//   Tensor grad_b = sum(grad_y, {0, 2, 3});
//
// Same geometry arguments as the forward. Floating dtypes; mixed dtypes promote; 16-bit types
// accumulate in f32. Non-contiguous inputs are copied to contiguous ones first.
#pragma once

#include <array>
#include <cstdint>

#include "runtime/tensor.h"

namespace wick {

// The transposed convolution of grad_out [N, O, Ho, Wo] with weight [O, C / groups, kh, kw]:
// d(sum(y * grad_out)) / dx, of shape x_shape [N, C, H, W] (given, since a strided forward drops
// trailing rows), in promote(grad_out, weight) on grad_out's device. Ho and Wo must be what the
// forward produces for x_shape.
Tensor conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Shape& x_shape,
                             std::array<int64_t, 2> stride = {1, 1}, std::array<int64_t, 2> padding = {0, 0},
                             std::array<int64_t, 2> dilation = {1, 1}, int64_t groups = 1);
// The correlation of x [N, C, H, W] with grad_out [N, O, Ho, Wo], summed over the batch:
// d(sum(y * grad_out)) / dweight, of shape weight_shape [O, C / groups, kh, kw], in
// promote(grad_out, x) on grad_out's device.
Tensor conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Shape& weight_shape,
                              std::array<int64_t, 2> stride = {1, 1}, std::array<int64_t, 2> padding = {0, 0},
                              std::array<int64_t, 2> dilation = {1, 1}, int64_t groups = 1);

}  // namespace wick
