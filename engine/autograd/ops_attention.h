// Differentiable scaled dot-product attention: runtime/ops/attention.h's forward recording one
// graph node whose gradient is its scaled_dot_product_attention_backward.
//
//   Tensor out = autograd::scaled_dot_product_attention(q, k, v);                 // q [B, H, Lq, D]
//   Tensor c = autograd::scaled_dot_product_attention(q, k, v, {}, std::nullopt, /*is_causal=*/true);
//   GradientStore g = backward(autograd::sum(out));                               // g.get(q), g.get(k), ...
//
// Same arguments and contract as wick::scaled_dot_product_attention, but returns only the output
// (the logsumexp is kept inside the node for the backward pass). Gradients flow to q, k and v; the
// mask is a constant (an additive float mask that requires grad gets none: wick does not compute
// dMask). Memory per recorded call: the node keeps q, k, v (already alive as inputs in a typical
// graph), out [B, H, Lq, Dv] and logsumexp [B, H, Lq] f32, never the Lq x Lk probabilities; the
// backward recomputes them (see runtime/ops/attention.h for the numbers at Flux shapes).
#pragma once

#include <optional>

#include "runtime/tensor.h"

namespace wick::autograd {

// q [B, H, Lq, D], k [B, H, Lk, D], v [B, H, Lk, Dv] -> out [B, H, Lq, Dv] in q's dtype.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask = Tensor(),
                                    std::optional<double> scale = std::nullopt, bool is_causal = false);

}  // namespace wick::autograd
