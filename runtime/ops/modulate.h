// The adaLN operations of DiT / SD3 / Flux blocks, as single operations: one pass over the tokens
// forward and one backward on the CPU (f32, f64), where the unfused forms take two and four or more.
// Other devices and dtypes compute them from the elementwise and reduce ops, with the same values.
//
//   Tensor h = modulate(x, shift, scale);                 // x·(1 + scale) + shift
//   Tensor y = gated_residual(x, gate, f);                // x + gate·f
//   ModulateGrads g = modulate_backward(grad, x, scale);  // d/dx, d/dshift, d/dscale
//
// x, f and grad are [B, N, D]; shift, scale and gate are [B, D], broadcast over the N tokens. All
// operands share one floating dtype and device.
#pragma once

#include "runtime/tensor.h"

namespace wick {

Tensor modulate(const Tensor& x, const Tensor& shift, const Tensor& scale);
Tensor gated_residual(const Tensor& x, const Tensor& gate, const Tensor& f);

struct ModulateGrads {
  Tensor x, shift, scale;  // each undefined unless asked for
};
// x is read only for the gradient of scale (it may be undefined otherwise).
ModulateGrads modulate_backward(const Tensor& grad, const Tensor& x, const Tensor& scale, bool need_x, bool need_shift,
                                bool need_scale);

struct GatedResidualGrads {
  Tensor gate, f;  // each undefined unless asked for; the gradient of x is grad itself
};
// f is read only for the gradient of gate (it may be undefined otherwise).
GatedResidualGrads gated_residual_backward(const Tensor& grad, const Tensor& gate, const Tensor& f, bool need_gate,
                                           bool need_f);

}  // namespace wick
