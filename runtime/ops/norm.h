// Normalization forward passes that also return the statistics their backward passes need.
//
//   auto [y, mean, rstd] = layer_norm(x, {x.size(-1)}, weight, bias, 1e-5);   // over the last axis
//   auto [y, rstd] = rms_norm(x, weight, 1e-6);
//   auto [y, mean, rstd] = group_norm(x, 32, weight, bias, 1e-5);             // x [N, C, H, W]
//
// Floating dtypes. Statistics are f32 (f64 for F64 inputs) and so is the arithmetic; y has x's
// dtype. Weight and bias may be of any floating dtype (converted to the statistics type).
// Non-contiguous x is copied to a contiguous tensor first.
#pragma once

#include "runtime/tensor.h"

namespace wick {

struct LayerNormResult {
  Tensor y, mean, rstd;
};
struct RmsNormResult {
  Tensor y, rstd;
};
struct GroupNormResult {
  Tensor y, mean, rstd;
};

// Normalizes x over its trailing axes equal to normalized_shape (non-empty):
// y = (x - mean) / sqrt(var + eps) * weight + bias, var the biased variance. weight and bias
// (optional) have normalized_shape; mean and rstd have x's shape without the normalized axes.
LayerNormResult layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                           const Tensor& bias = Tensor(), double eps = 1e-5);
// y = x / sqrt(mean(x^2) + eps) * weight over the last axis; weight (optional) [D]; rstd has
// x's shape without the last axis.
RmsNormResult rms_norm(const Tensor& x, const Tensor& weight = Tensor(), double eps = 1e-6);
// x [N, C, *]: normalizes each of n_groups groups of C / n_groups channels (with all their
// spatial positions) of each sample; weight and bias (optional) [C]; mean and rstd [N, n_groups].
GroupNormResult group_norm(const Tensor& x, int64_t n_groups, const Tensor& weight = Tensor(),
                           const Tensor& bias = Tensor(), double eps = 1e-5);

}  // namespace wick
