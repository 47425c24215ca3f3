// Differentiable matrix products and convolution: the runtime ops of runtime/ops/matmul.h and
// runtime/ops/conv.h that record the graph when an input requires a gradient.
//
//   Tensor h = autograd::linear(x, w, b);                    // x [..., in], w [out, in], b [out]
//   Tensor s = autograd::matmul(q, k, false, true);          // q @ k^T, batch axes broadcast
//   Tensor y = autograd::conv2d(x, kernel, bias, {2, 2}, {1, 1});
//
// Gradients of broadcast batch axes are summed back to each operand's shape; 1-d operands follow
// torch.matmul's rules. The backward products are runtime matmuls on transposed views (no copies)
// and the runtime's conv2d_backward_input / conv2d_backward_weight.
#pragma once

#include <array>
#include <cstdint>

#include "runtime/tensor.h"

namespace wick::autograd {

// As wick::matmul: a [..., M, K] @ b [..., K, N] with broadcast batch axes and 1-d rules.
Tensor matmul(const Tensor& a, const Tensor& b);
// As wick::matmul with transpose flags (the last two axes of a and/or b transposed as views).
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b);
// As wick::linear: x [..., in] @ weight[out, in]^T + bias[out] (bias optional).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// As wick::conv2d: x [N, C, H, W], weight [O, C / groups, kh, kw], optional bias [O].
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              std::array<int64_t, 2> stride = {1, 1}, std::array<int64_t, 2> padding = {0, 0},
              std::array<int64_t, 2> dilation = {1, 1}, int64_t groups = 1);

}  // namespace wick::autograd
