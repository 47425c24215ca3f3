// The column matrices of the CPU convolutions: im2col (forward, weight gradient) and its adjoint
// col2im (input gradient), for one batch item.
//
//   im2col(g, x_item, columns);     // x [c, h, w] -> columns [c * kh * kw, ho * wo]
//   col2im(g, columns, dx_item);    // columns -> dx [c, h, w], overlapping taps summed
#pragma once

#include <algorithm>
#include <cstdint>

#include "runtime/cpu/parallel.h"
#include "runtime/ops/conv_geometry.h"

namespace wick::cpu {

// One item's x [c, h, w] into columns [c * kh * kw, ho * wo]; padding reads as zero.
template <typename T>
void im2col(const Conv2dGeometry& g, const T* x, T* columns) {
  int64_t n_rows = g.c * g.kh * g.kw, n_columns = g.ho * g.wo;
  int64_t grain = std::max<int64_t>(1, default_grain / std::max<int64_t>(1, n_columns));
  parallel_for(n_rows, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      int64_t channel = row / (g.kh * g.kw), ki = (row / g.kw) % g.kh, kj = row % g.kw;
      const T* plane = x + channel * g.h * g.w;
      T* out = columns + row * n_columns;
      for (int64_t oh = 0; oh < g.ho; ++oh) {
        int64_t ih = oh * g.sh - g.ph + ki * g.dh;
        for (int64_t ow = 0; ow < g.wo; ++ow) {
          int64_t iw = ow * g.sw - g.pw + kj * g.dw;
          bool inside = ih >= 0 && ih < g.h && iw >= 0 && iw < g.w;
          out[oh * g.wo + ow] = inside ? plane[ih * g.w + iw] : T(0);
        }
      }
    }
  }, grain);
}

// The adjoint of im2col: dx[channel, ih, iw] = sum of the columns entries that im2col copied from
// (channel, ih, iw). Channels run in parallel (each owns its plane: no races); taps falling into
// the padding are dropped.
template <typename T>
void col2im(const Conv2dGeometry& g, const T* columns, T* x) {
  int64_t n_columns = g.ho * g.wo, plane = g.h * g.w;
  int64_t grain = std::max<int64_t>(1, default_grain / std::max<int64_t>(1, g.kh * g.kw * n_columns));
  parallel_for(g.c, [&](int64_t begin, int64_t end) {
    for (int64_t channel = begin; channel < end; ++channel) {
      T* out = x + channel * plane;
      std::fill(out, out + plane, T(0));
      for (int64_t ki = 0; ki < g.kh; ++ki)
        for (int64_t kj = 0; kj < g.kw; ++kj) {
          const T* in = columns + ((channel * g.kh + ki) * g.kw + kj) * n_columns;
          for (int64_t oh = 0; oh < g.ho; ++oh) {
            int64_t ih = oh * g.sh - g.ph + ki * g.dh;
            if (ih < 0 || ih >= g.h) continue;
            for (int64_t ow = 0; ow < g.wo; ++ow) {
              int64_t iw = ow * g.sw - g.pw + kj * g.dw;
              if (iw >= 0 && iw < g.w) out[ih * g.w + iw] += in[oh * g.wo + ow];
            }
          }
        }
    }
  }, grain);
}

}  // namespace wick::cpu
