// The row-normalization problem shared by layer_norm, rms_norm and group_norm and their CPU and
// CUDA backends (C++17-clean).
//
//   NormProblem p{.rows = 6, .row_size = 128, .subtract_mean = true, .eps = 1e-5};   // layer_norm
//   // group_norm over x [N, C, S]: rows = N * G, row_size = (C / G) * S, and the affine channel of
//   // element j of row r is (r % G) * (C / G) + j / S:
//   NormProblem q{.rows = N * G, .row_size = C / G * S, .subtract_mean = true,
//                 .groups = G, .channels_per_group = C / G, .inner = S, .eps = 1e-5};
#pragma once

#include <cstdint>

#include "runtime/dtype.h"

namespace wick {

struct NormProblem {
  int64_t rows = 0, row_size = 0;
  bool subtract_mean = true;  // false: RMS normalization (no mean, no bias)
  // Affine channel of element j in row r: (r % groups) * channels_per_group + j / inner.
  // Layer/RMS norm: groups 1, channels_per_group 0, inner 1 (the channel is j).
  int64_t groups = 1, channels_per_group = 0, inner = 1;
  double eps = 1e-5;

  WICK_HD int64_t channel_of(int64_t row, int64_t j) const {
    return (row % groups) * channels_per_group + j / inner;
  }
};

}  // namespace wick
