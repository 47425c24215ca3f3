// Differentiable layout: the Tensor view methods (runtime/tensor.h) as free functions that record
// the graph when the input requires a gradient, dtype and device moves, and the layout changes
// between channels, space and tokens (runtime/ops/layout.h).
//
//   Tensor h = autograd::reshape(x, {b, l, heads, d});          // a view of x's storage
//   Tensor q = autograd::transpose(h, 1, 2);                     // [b, heads, l, d], still a view
//   Tensor y = autograd::to_dtype(q, DType::BF16);              // a cast; its gradient is cast back
//   Tensor t = autograd::patchify(latents, 2);                  // dlatents = unpatchify(dt, 2, H, W)
//
// View ops return views that share x's storage (no copy, exactly as the Tensor methods) but carry
// their own autograd state. Gradients: reshapes reshape back, permutes apply the inverse order,
// narrow/slice/select scatter the gradient into zeros of x's shape, expand sums over the expanded
// axes, contiguous passes it through. Writing into a view in place is not tracked.
#pragma once

#include <vector>

#include "runtime/tensor.h"

namespace wick::autograd {

// ---- views (same contracts as the Tensor methods of the same name) ----
Tensor view(const Tensor& x, Shape shape);      // throws when the strides do not allow a view
Tensor reshape(const Tensor& x, Shape shape);   // a view when possible, else a contiguous copy
Tensor flatten(const Tensor& x, int64_t start_axis = 0, int64_t end_axis = -1);
Tensor permute(const Tensor& x, const std::vector<int64_t>& order);
Tensor transpose(const Tensor& x, int64_t axis_a, int64_t axis_b);
Tensor narrow(const Tensor& x, int64_t axis, int64_t start, int64_t length);
// Python-style [start:end:step] along axis (step > 0; negative start/end count from the end).
Tensor slice(const Tensor& x, int64_t axis, int64_t start, int64_t end, int64_t step = 1);
// x[..., index, ...] along axis, removing the axis (negative index counts from the end).
Tensor select(const Tensor& x, int64_t axis, int64_t index);
// Broadcast to `shape` (-1 keeps an extent; new leading axes allowed). Gradient: summed back.
Tensor expand(const Tensor& x, const Shape& shape);
Tensor squeeze(const Tensor& x, int64_t axis);  // x itself (new handle) when the extent is not 1
Tensor squeeze(const Tensor& x);                 // all extent-1 axes
Tensor unsqueeze(const Tensor& x, int64_t axis);

// ---- copies ----
// A contiguous copy of x (x itself, as a new handle, when already contiguous). Gradient: identity.
Tensor contiguous(const Tensor& x);
// Cast to `dtype` (round to nearest even); the gradient is cast back to x's dtype. An integer
// target is not differentiable (the result records nothing).
Tensor to_dtype(const Tensor& x, DType dtype);
// Move to `device`; the gradient is moved back to x's device.
Tensor to_device(const Tensor& x, Device device);

// ---- layout changes between channels, space and tokens (runtime/ops/layout.h) ----
// Each op is a permutation of elements, so its gradient is its inverse applied to the output
// gradient: y = pixel_shuffle(x, 2) has dx = pixel_unshuffle(dy, 2).
// Same contracts as the runtime ops of the same names.
Tensor pixel_shuffle(const Tensor& x, int64_t r);
Tensor pixel_unshuffle(const Tensor& x, int64_t r);
Tensor patchify(const Tensor& x, int64_t p);
Tensor unpatchify(const Tensor& tokens, int64_t p, int64_t height, int64_t width);

}  // namespace wick::autograd
