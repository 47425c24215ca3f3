// Differentiable adaLN operations (runtime/ops/modulate.h): modulate and the gated residual of DiT
// blocks as one node each, so the CPU makes one pass forward and one backward over the tokens.
//
//   Tensor h = autograd::modulate(autograd::layer_norm(x), shift, scale);   // x·(1 + scale) + shift
//   Tensor y = autograd::gated_residual(x, gate, attention(h));             // x + gate·f
//
// x and f [B, N, D]; shift, scale, gate [B, D]. Gradients equal those of the unfused expressions
// (tests/engine/grad_modulate_cases.cpp checks them against finite differences).
#pragma once

#include "runtime/tensor.h"

namespace wick::autograd {

Tensor modulate(const Tensor& x, const Tensor& shift, const Tensor& scale);
Tensor gated_residual(const Tensor& x, const Tensor& gate, const Tensor& f);

}  // namespace wick::autograd
