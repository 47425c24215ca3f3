// Reductions over any set of axes. (Softmax and log-softmax along one axis: runtime/ops/softmax.h.)
//
//   Tensor s = sum(x);                          // all axes -> 0-d
//   Tensor m = mean(x, {1, -1}, /*keepdim=*/true);
//   Tensor i = argmax(x, {-1});                 // i64 indices, first index on ties
//   Tensor v = var(x, {0}, false, /*correction=*/0);   // population variance
//
// axes: any order, negative counts from the end, no repeats; an empty list means all axes.
// keepdim keeps reduced axes with extent 1. Accumulation: f32 for f32/bf16/f16, f64 for f64,
// i64 for integers. Output dtype: the input's, except sum of integers -> i64 and argmax -> i64.
// mean, var and logsumexp need a floating dtype. Outputs are new contiguous tensors on x's device.
// Reducing over an empty axis: sum -> 0, mean and var -> NaN, logsumexp -> -inf; max, min and
// argmax throw.
#pragma once

#include <vector>

#include "runtime/tensor.h"

namespace wick {

Tensor sum(const Tensor& x, const std::vector<int64_t>& axes = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& axes = {}, bool keepdim = false);
// NaN propagates: a row holding NaN gives NaN.
Tensor max(const Tensor& x, const std::vector<int64_t>& axes = {}, bool keepdim = false);
Tensor min(const Tensor& x, const std::vector<int64_t>& axes = {}, bool keepdim = false);
// Index of the maximum within the flattened reduced axes (row-major over them, in x's axis
// order), as i64. Ties: the first (lowest) index. NaN counts as the maximum (first NaN wins).
Tensor argmax(const Tensor& x, const std::vector<int64_t>& axes = {}, bool keepdim = false);
// sum((x - mean)^2) / max(N - correction, 0) over the N reduced elements, like torch.var:
// correction 1 (default) is the unbiased sample variance, 0 the population variance.
// Two-pass (mean first), so large offsets do not cancel.
Tensor var(const Tensor& x, const std::vector<int64_t>& axes = {}, bool keepdim = false, double correction = 1.0);
// log(sum(exp(x))) computed as m + log(sum(exp(x - m))) with m the maximum: no overflow.
Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& axes = {}, bool keepdim = false);

}  // namespace wick
