// Differentiable dropout with masks from Philox streams (so a mask can be recomputed exactly).
//
//   Tensor y = autograd::dropout(x, 0.1, stream, offset, training);  // explicit stream and offset
//   Tensor z = autograd::dropout(h, 0.1, training);                  // from the thread's cursor
//
// In training, keep = bernoulli_mask(x.shape(), 1 - p, stream, x.device(), offset) (U8, element i
// from stream element offset + i) and y = x * keep / (1 - p); the backward multiplies by the same
// saved U8 mask: dx = dy * keep / (1 - p). With p = 0 or training = false, y is x (no mask, no
// node, no random numbers drawn). p = 1 drops everything (y = 0, dx = 0).
#pragma once

#include <cstdint>

#include "runtime/philox.h"
#include "runtime/tensor.h"

namespace wick::autograd {

// x floating, any device; p in [0, 1].
Tensor dropout(const Tensor& x, double p, const RngStream& stream, uint64_t offset, bool training);
// The same, drawing x.numel() elements from this thread's cursor (engine/autograd/rng_state.h);
// the cursor advances only when a mask is drawn (training and p > 0).
Tensor dropout(const Tensor& x, double p, bool training);

}  // namespace wick::autograd
