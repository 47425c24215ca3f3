// The differentiable float8 linear: a Linear whose frozen weight is stored as e4m3 codes with f32
// scales (runtime/ops/float8.h), dequantized to the compute dtype in forward and again in backward.
//
//   Float8Weight q = quantize_float8(w, Float8Scaling::PerRow);
//   Tensor y = autograd::float8_linear(x, q.codes, q.scale, bias);   // x [..., in] -> [..., out]
//
// The weight never gets a gradient (its codes are not differentiable): only x (and a bias that
// requires one) do. The node keeps the codes and scale (references, no copies), not a dense weight,
// so a step holds at most one dequantized weight at a time.
#pragma once

#include "runtime/tensor.h"

namespace wick::autograd {

// As wick::float8_linear; records the graph when x or bias requires a gradient.
Tensor float8_linear(const Tensor& x, const Tensor& codes, const Tensor& scale, const Tensor& bias = Tensor());

}  // namespace wick::autograd
