// Differentiable joining, splitting and padding (runtime/ops/join.h with gradients).
//
//   Tensor c = autograd::concat({a, b}, 1);                  // grads: narrow views of dc
//   std::vector<Tensor> qkv = autograd::chunk(x, 3, -1);    // one node, three outputs
//   Tensor p = autograd::pad(x, {1, 1, 1, 1}, PadMode::Reflect);
//
// split and chunk return views of x (as the runtime ops) recorded by ONE multi-output node; an
// output that received no gradient contributes zeros. Gradients of concat/stack inputs come back
// in each input's own dtype. pad's gradient: the interior of the output gradient, plus (reflect)
// the mirrored border or (replicate) the border summed onto the edge, axis by axis.
#pragma once

#include <vector>

#include "runtime/ops/join.h"
#include "runtime/tensor.h"

namespace wick::autograd {

// Same contracts as the runtime ops of the same names.
Tensor concat(const std::vector<Tensor>& tensors, int64_t axis);
Tensor stack(const std::vector<Tensor>& tensors, int64_t axis);
std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t axis);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t axis);
std::vector<Tensor> chunk(const Tensor& x, int64_t n_chunks, int64_t axis);
Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, PadMode mode = PadMode::Constant, double value = 0.0);

}  // namespace wick::autograd
