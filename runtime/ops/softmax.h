// Softmax and log-softmax along one axis, and the gradient of softmax fused into one pass over each
// row (autograd's softmax node calls it).
//
//   Tensor p = softmax(logits, -1);
//   Tensor l = log_softmax(logits, 1);
//   Tensor grad_x = softmax_backward(grad_y, p, -1);   // p * (grad_y - sum(grad_y * p, -1))
//
// Floating dtypes; outputs are new contiguous tensors in x's dtype, shape and device.
#pragma once

#include <cstdint>

#include "runtime/tensor.h"

namespace wick {

// exp(x - max) / sum(exp(x - max)) along `axis` (negative allowed); math in f32 (f64 for f64),
// output in x's dtype and shape.
Tensor softmax(const Tensor& x, int64_t axis = -1);
// x - max - log(sum(exp(x - max))) along `axis`.
Tensor log_softmax(const Tensor& x, int64_t axis = -1);

// ---- gradients ----
// grad_y and y: the same shape and device, floating dtypes; y is softmax's output along `axis`
// (negative counts from the end). Returns grad_x = y * (grad_y - sum(grad_y * y, axis, keepdim))
// as a new contiguous tensor of dtype promote_types(grad_y, y); the sum and the arithmetic run in
// f32 (f64 for F64). Contiguous inputs over the last axis are read in place; other layouts and
// dtypes are copied into rows first.
Tensor softmax_backward(const Tensor& grad_y, const Tensor& y, int64_t axis = -1);

}  // namespace wick
