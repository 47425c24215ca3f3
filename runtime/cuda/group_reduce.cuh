// One row reduced by a group of threads, one warp or one block: the pieces the CUDA reduce and
// softmax kernels share (runtime/cuda/reduce.cu, softmax.cu). Rows of up to 512 elements get a warp
// each, longer rows a 256-thread block.
//
//   launch_rows(n_rows, n, [&](auto group_tag, unsigned blocks) { kernel<decltype(group_tag)::value><<<...>>>(); });
//   int64_t r = group_row<kGroup>();   A m = group_reduce<kGroup>(partial, MaxOp{});   // in the kernel
#pragma once

#include <cstdint>
#include <type_traits>

#include "runtime/ops/elementwise_math.h"

namespace wick::cuda {

constexpr int threads_per_block = 256;
constexpr int warps_per_block = threads_per_block / 32;

// ---- kernels ----
// A "group" of kGroup threads reduces one row: kGroup == 32 is one warp (8 rows per block),
// kGroup == 256 the whole block. Every thread of a group ends with the group's result.

struct SumOp {
  template <typename A>
  __device__ A operator()(A a, A b) const { return a + b; }
};
struct MaxOp {
  template <typename A>
  __device__ A operator()(A a, A b) const { return math::maximum(a, b); }
};
struct MinOp {
  template <typename A>
  __device__ A operator()(A a, A b) const { return math::minimum(a, b); }
};

template <int kGroup, typename A, typename Combine>
__device__ A group_reduce(A value, Combine combine) {
  for (int offset = 16; offset > 0; offset >>= 1) value = combine(value, __shfl_xor_sync(0xffffffffu, value, offset));
  if constexpr (kGroup == 32) {
    return value;
  } else {
    __shared__ A partial[warps_per_block];
    __syncthreads();  // earlier readers of `partial` are done
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = value;
    __syncthreads();
    A total = partial[0];
    for (int w = 1; w < warps_per_block; ++w) total = combine(total, partial[w]);
    return total;
  }
}

template <int kGroup>
__device__ int64_t group_row() {
  return kGroup == 32 ? int64_t(blockIdx.x) * warps_per_block + threadIdx.x / 32 : int64_t(blockIdx.x);
}

// ---- launchers ----

// Launches kernel<kGroup> with the row-to-group mapping above.
template <typename Launch>
void launch_rows(int64_t n_rows, int64_t row_length, const Launch& launch) {
  if (row_length <= 512)
    launch(std::integral_constant<int, 32>{}, static_cast<unsigned>((n_rows + warps_per_block - 1) / warps_per_block));
  else
    launch(std::integral_constant<int, 256>{}, static_cast<unsigned>(n_rows));
}

}  // namespace wick::cuda
