// Differentiable normalizations: the runtime ops of runtime/ops/norm.h, returning y only. The
// graph node keeps the mean and rstd the runtime forward computed; the backward is the runtime's
// layer_norm_backward / rms_norm_backward / group_norm_backward (runtime/ops/norm.h).
//
//   Tensor h = autograd::layer_norm(x, {x.size(-1)}, gamma, beta);   // gamma, beta optional
//   Tensor r = autograd::rms_norm(x, gamma, 1e-6);
//   Tensor g = autograd::group_norm(x, 32, gamma, beta);             // x [N, C, *]
//
// Gradients flow to x, weight and bias. Weight/bias gradients are computed in the statistics type
// (f32 for 16-bit x) and converted by the engine to what the parameter's gradient is kept in.
#pragma once

#include "runtime/tensor.h"

namespace wick::autograd {

// As wick::layer_norm (normalizes over the trailing axes equal to normalized_shape); returns y.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
// As wick::rms_norm over the last axis; returns y.
Tensor rms_norm(const Tensor& x, const Tensor& weight = Tensor(), double eps = 1e-6);
// As wick::group_norm over x [N, C, *] in n_groups groups; returns y.
Tensor group_norm(const Tensor& x, int64_t n_groups, const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                  double eps = 1e-5);

}  // namespace wick::autograd
