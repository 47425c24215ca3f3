// Differentiable softmax and log-softmax: the runtime ops of runtime/ops/softmax.h that record the
// graph when the input requires a gradient (same names, arguments and results).
//
//   Tensor p = autograd::softmax(logits, -1);
//   Tensor l = autograd::log_softmax(logits, 1);
//
// Each op is one Node beside its forward in ops_softmax.cpp; softmax's gradient is the runtime's
// fused softmax_backward.
#pragma once

#include <cstdint>

#include "runtime/tensor.h"

namespace wick::autograd {

// d/dx = y (g - sum(g y)) along `axis`, y the softmax.
Tensor softmax(const Tensor& x, int64_t axis = -1);
// d/dx = g - softmax(x) sum(g) along `axis`.
Tensor log_softmax(const Tensor& x, int64_t axis = -1);

}  // namespace wick::autograd
