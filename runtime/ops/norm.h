// Normalization forward passes that also return the statistics their backward passes need, and
// those backward passes (the gradients, from the saved statistics).
//
//   auto [y, mean, rstd] = layer_norm(x, {x.size(-1)}, weight, bias, 1e-5);   // over the last axis
//   auto [y, rstd] = rms_norm(x, weight, 1e-6);
//   auto [y, mean, rstd] = group_norm(x, 32, weight, bias, 1e-5);             // x [N, C, H, W]
//   auto [grad_x, grad_weight, grad_bias] = layer_norm_backward(grad_y, x, mean, rstd, weight);
//   auto [grad_x2, grad_weight2] = rms_norm_backward(grad_y, x, rstd, weight);
//   auto [grad_x3, grad_weight3, grad_bias3] = group_norm_backward(grad_y, x, mean, rstd, weight);
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

// ---- gradients, from the statistics the forwards saved ----
// With xhat = (x - mean) * rstd (x * rstd for RMS), g = grad_y and gw = g * weight, per normalized
// row of D elements: grad_x = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)) (RMS: without the
// mean(gw) term); grad_weight = sum of g * xhat and grad_bias = sum of g over everything that
// shares a weight element. Math in f32 (f64 for F64 x), 16-bit tensors read and written as such;
// the weight/bias sums are deterministic (no float atomics). grad_y is cast to x's dtype and both
// are made contiguous first.
struct LayerNormGrads {
  Tensor grad_x, grad_weight, grad_bias;
};
struct RmsNormGrads {
  Tensor grad_x, grad_weight;
};
struct GroupNormGrads {
  Tensor grad_x, grad_weight, grad_bias;
};

// x and grad_y of one shape; mean and rstd as layer_norm returned them (x's shape without the
// normalized trailing axes, which they thereby define); weight (optional) of the normalized shape.
// grad_x has x's dtype; grad_weight (only when weight is defined) and grad_bias (only when
// with_bias_grad) have the normalized shape and the statistics type (f32, f64 for F64 x).
LayerNormGrads layer_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                   const Tensor& weight = Tensor(), bool with_bias_grad = true);
// rstd as rms_norm returned it (x's shape without the last axis); weight (optional) [D]; grad_weight
// (only when weight is defined) [D] in the statistics type.
RmsNormGrads rms_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& rstd,
                               const Tensor& weight = Tensor());
// x [N, C, *]; mean and rstd [N, n_groups] as group_norm returned them; weight (optional) [C];
// grad_weight (only when weight is defined) and grad_bias (only when with_bias_grad) are [C] in the
// statistics type.
GroupNormGrads group_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                   const Tensor& weight = Tensor(), bool with_bias_grad = true);

}  // namespace wick
