// Launch geometry shared by the elementwise-style kernels: grid-stride loops over n elements.
//
//   my_kernel<<<grid_for(n), block_size, 0, stream>>>(...);
#pragma once

#include <cstdint>

namespace wick::cuda {

inline constexpr int block_size = 256;

// Enough blocks to cover n with block_size threads each, capped so grid-stride loops do the rest.
inline unsigned grid_for(int64_t n, int threads = block_size) {
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  if (blocks > 65535 * 8) blocks = 65535 * 8;
  return static_cast<unsigned>(blocks);
}

}  // namespace wick::cuda
