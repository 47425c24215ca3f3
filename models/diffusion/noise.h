// Per-sample Philox noise shared by the objectives (internal to models/diffusion).
//
//   Tensor eps = sample_noise(x0.shape(), sample_ids, epoch, seed, /*offset=*/0.0357, x0.dtype(), x0.device());
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/tensor.h"

namespace wick::diffusion {

// ε [B, ...]: sample i is randn(shape[1:]) from derive_stream(seed, sample_ids[i], epoch, Noise); with
// offset k != 0 (rank >= 2) it adds k·z_c per channel, z = elements n .. n + C − 1 of the same stream
// (n = elements per sample). Drawn in f32, cast to dtype.
Tensor sample_noise(const Shape& shape, const std::vector<uint64_t>& sample_ids, uint64_t epoch, uint64_t seed,
                    double offset, DType dtype, Device device);

// v [B] viewed as [B, 1, ..., 1] of the given rank.
Tensor per_sample_view(const Tensor& v, int64_t rank);

}  // namespace wick::diffusion
