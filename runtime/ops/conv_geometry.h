// The shape arithmetic of a 2-d convolution, shared by the conv front-end and its CPU and CUDA
// backends (C++17-clean).
//
//   Conv2dGeometry g = {.n = 2, .c = 4, .h = 9, .w = 9, .o = 8, .kh = 3, .kw = 3, ...};
//   g.ho = conv_output_extent(g.h, g.kh, g.sh, g.ph, g.dh);   // floor((h + 2p - d(k-1) - 1) / s) + 1
#pragma once

#include <cstdint>

namespace wick {

struct Conv2dGeometry {
  int64_t n = 0, c = 0, h = 0, w = 0;  // input [n, c, h, w]
  int64_t o = 0, kh = 0, kw = 0;       // weight [o, c / groups, kh, kw]
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  int64_t groups = 1;
  int64_t ho = 0, wo = 0;  // output [n, o, ho, wo]

  int64_t channels_per_group() const { return c / groups; }
  int64_t outputs_per_group() const { return o / groups; }
  // Rows of the im2col matrix of one group: (c / groups) * kh * kw.
  int64_t patch_size() const { return channels_per_group() * kh * kw; }
};

inline int64_t conv_output_extent(int64_t in, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation) {
  return (in + 2 * padding - dilation * (kernel - 1) - 1) / stride + 1;
}

}  // namespace wick
