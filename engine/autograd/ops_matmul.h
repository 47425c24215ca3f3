// Differentiable matrix products: the runtime ops of runtime/ops/matmul.h that record the graph when
// an input requires a gradient.
//
//   Tensor h = autograd::linear(x, w, b);                    // x [..., in], w [out, in], b [out]
//   Tensor s = autograd::matmul(q, k, false, true);          // q @ k^T, batch axes broadcast
//
// Gradients of broadcast batch axes are summed back to each operand's shape; 1-d operands follow
// torch.matmul's rules. The backward products are runtime matmuls on transposed views (no copies).
#pragma once

#include "runtime/tensor.h"

namespace wick::autograd {

// As wick::matmul: a [..., M, K] @ b [..., K, N] with broadcast batch axes and 1-d rules.
Tensor matmul(const Tensor& a, const Tensor& b);
// As wick::matmul with transpose flags (the last two axes of a and/or b transposed as views).
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b);
// As wick::linear: x [..., in] @ weight[out, in]^T + bias[out] (bias optional).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace wick::autograd
