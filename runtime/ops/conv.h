// 2-d convolution (cross-correlation, as torch.nn.functional.conv2d), forward.
//
//   Tensor y = conv2d(x, weight);                                   // x [N, C, H, W], weight [O, C, 3, 3]
//   Tensor z = conv2d(x, weight, bias, {2, 2}, {1, 1});             // stride 2, padding 1
//   Tensor d = conv2d(x, depthwise_weight, {}, {1, 1}, {2, 2}, {2, 2}, C);   // dilation 2, groups = C
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

}  // namespace wick
