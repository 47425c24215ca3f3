// Gradient of softmax along one axis, fused into one pass over each row (autograd's softmax node
// calls it).
//
//   Tensor y = softmax(x, -1);
//   Tensor grad_x = softmax_backward(grad_y, y, -1);   // y * (grad_y - sum(grad_y * y, -1))
#pragma once

#include <cstdint>

#include "runtime/tensor.h"

namespace wick {

// grad_y and y: the same shape and device, floating dtypes; y is softmax's output along `axis`
// (negative counts from the end). Returns grad_x = y * (grad_y - sum(grad_y * y, axis, keepdim))
// as a new contiguous tensor of dtype promote_types(grad_y, y); the sum and the arithmetic run in
// f32 (f64 for F64). Contiguous inputs over the last axis are read in place; other layouts and
// dtypes are copied into rows first.
Tensor softmax_backward(const Tensor& grad_y, const Tensor& y, int64_t axis = -1);

}  // namespace wick
