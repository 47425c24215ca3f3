// Differentiable convolution: runtime/ops/conv.h's conv2d recording the graph when an input
// requires a gradient.
//
//   Tensor y = autograd::conv2d(x, kernel, bias, {2, 2}, {1, 1});
//
// The backward is the runtime's conv2d_backward_input / conv2d_backward_weight, and a sum for the bias.
#pragma once

#include <array>
#include <cstdint>

#include "runtime/tensor.h"

namespace wick::autograd {

// As wick::conv2d: x [N, C, H, W], weight [O, C / groups, kh, kw], optional bias [O].
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              std::array<int64_t, 2> stride = {1, 1}, std::array<int64_t, 2> padding = {0, 0},
              std::array<int64_t, 2> dilation = {1, 1}, int64_t groups = 1);

}  // namespace wick::autograd
