// Differentiable reductions: the runtime ops of runtime/ops/reduce.h that record the graph when the
// input requires a gradient (same names, arguments and results). Softmax: ops_softmax.h.
//
//   Tensor loss = autograd::mean(autograd::square(y - t));          // all axes -> 0-d
//   Tensor m = autograd::max(x, {1}, /*keepdim=*/true);
//
// Each op is one Node beside its forward in ops_reduce.cpp; the rule is written with runtime ops.
// The output gradient is broadcast back over the reduced axes (keepdim or not).
#pragma once

#include <vector>

#include "runtime/tensor.h"

namespace wick::autograd {

// d/dx = the output gradient, broadcast over the reduced axes.
Tensor sum(const Tensor& x, const std::vector<int64_t>& axes = {}, bool keepdim = false);
// d/dx = the output gradient / N (N reduced elements).
Tensor mean(const Tensor& x, const std::vector<int64_t>& axes = {}, bool keepdim = false);
// Gradient to the positions equal to the result, split evenly among ties (torch.amax / amin and
// the all-axes torch.max(x); NOT torch.max(x, dim), which picks one index).
Tensor max(const Tensor& x, const std::vector<int64_t>& axes = {}, bool keepdim = false);
Tensor min(const Tensor& x, const std::vector<int64_t>& axes = {}, bool keepdim = false);
// NOT differentiable (i64 indices): the runtime result, never requiring a gradient.
Tensor argmax(const Tensor& x, const std::vector<int64_t>& axes = {}, bool keepdim = false);
// d/dx = 2 (x - mean) / max(N - correction, 0) times the output gradient.
Tensor var(const Tensor& x, const std::vector<int64_t>& axes = {}, bool keepdim = false, double correction = 1.0);
// d/dx = exp(x - logsumexp(x)) times the output gradient (softmax over the reduced axes).
Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& axes = {}, bool keepdim = false);

}  // namespace wick::autograd
