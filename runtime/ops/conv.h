// 2-d convolution (cross-correlation, as torch.nn.functional.conv2d), forward, and its gradients
// (for the autograd conv2d node).
//
//   Tensor y = conv2d(x, weight);                                   // x [N, C, H, W], weight [O, C, 3, 3]
//   Tensor z = conv2d(x, weight, bias, {2, 2}, {1, 1});             // stride 2, padding 1
//   Tensor d = conv2d(x, depthwise_weight, {}, {1, 1}, {2, 2}, {2, 2}, C);   // dilation 2, groups = C
//   Tensor grad_x = conv2d_backward_input(grad_y, weight, x.shape(), stride, padding, dilation, groups);
//   Tensor grad_w = conv2d_backward_weight(grad_y, x, weight.shape(), stride, padding, dilation, groups);
//   Tensor grad_b = sum(grad_y, {0, 2, 3});
//
// Floating dtypes; mixed dtypes promote. 16-bit types accumulate in f32 (the CPU converts them to
// f32 and back). Non-contiguous inputs are copied to contiguous ones first.
#pragma once

#include <array>
#include <cstdint>

#include "runtime/tensor.h"

namespace wick {

// x [N, C, H, W], weight [O, C / groups, kh, kw], optional bias [O] -> y [N, O, Ho, Wo] with
// Ho = floor((H + 2 ph - dh (kh - 1) - 1) / sh) + 1 (likewise Wo), in the promoted dtype on x's
// device. C and O must be divisible by groups; stride and dilation >= 1, padding >= 0.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              std::array<int64_t, 2> stride = {1, 1}, std::array<int64_t, 2> padding = {0, 0},
              std::array<int64_t, 2> dilation = {1, 1}, int64_t groups = 1);

// ---- gradients ----
// Same geometry arguments as the forward. Floating dtypes; mixed dtypes promote; 16-bit types
// accumulate in f32. Non-contiguous inputs are copied to contiguous ones first.
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
