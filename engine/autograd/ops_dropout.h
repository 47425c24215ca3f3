// Differentiable dropout with masks from Philox streams (so a mask can be recomputed exactly).
//
//   Tensor y = autograd::dropout(x, 0.1, stream, offset, training);  // explicit stream and offset
//   Tensor w = autograd::dropout(x, 0.1, streams, offset, training); // row b from streams[b]
//   Tensor z = autograd::dropout(h, 0.1, training);                  // from the thread's cursor
//
// In training, keep = bernoulli_mask(x.shape(), 1 - p, stream, x.device(), offset) (U8, element i
// from stream element offset + i) and y = x * keep / (1 - p); the backward multiplies by the same
// saved U8 mask: dx = dy * keep / (1 - p). With per-row streams, row b of the mask (x[b], n / B
// elements) is bernoulli_mask(x[b].shape(), 1 - p, streams[b], x.device(), offset). With p = 0 or
// training = false, y is x (no mask, no node, no random numbers drawn). p = 1 drops everything
// (y = 0, dx = 0).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/philox.h"
#include "runtime/tensor.h"

namespace wick::autograd {

// x floating, any device; p in [0, 1].
Tensor dropout(const Tensor& x, double p, const RngStream& stream, uint64_t offset, bool training);
// x [B, ...] with B == row_streams.size() >= 1: row b's mask from row_streams[b] at `offset`.
Tensor dropout(const Tensor& x, double p, const std::vector<RngStream>& row_streams, uint64_t offset, bool training);
// The same, drawing from this thread's cursor (engine/autograd/rng_state.h): per sample (numel / B
// elements of each sample stream) when x's leading axis matches the cursor's sample streams, else
// x.numel() elements of the shared stream. The cursor advances only when a mask is drawn (training
// and p > 0).
Tensor dropout(const Tensor& x, double p, bool training);

}  // namespace wick::autograd
