// Warp- and row-level reductions shared by the row kernels (norms, attention).
//
//   S total = warp_sum(partial);                       // every lane of the warp gets the total
//   S row = row_sum<kThreads>(partial, shared);        // kThreads lanes share a row (32 or a block)
#pragma once

namespace wick::cuda {

template <typename S>
__device__ __forceinline__ S warp_sum(S value) {
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

template <typename S>
__device__ __forceinline__ S warp_max(S value) {
  for (int offset = 16; offset > 0; offset /= 2) value = fmax(value, __shfl_xor_sync(0xffffffffu, value, offset));
  return value;
}

// Sum over the kThreads threads that share a row; every one of them gets the total. For
// kThreads > 32 the row owns the whole block (blockDim.x == kThreads) and `shared` holds 32 values.
template <int kThreads, typename S>
__device__ __forceinline__ S row_sum(S value, S* shared) {
  value = warp_sum(value);
  if constexpr (kThreads > 32) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    __syncthreads();  // the previous reduction's readers are done with `shared`
    if (lane == 0) shared[warp] = value;
    __syncthreads();
    value = lane < kThreads / 32 ? shared[lane] : S(0);
    value = warp_sum(value);
  }
  return value;
}

}  // namespace wick::cuda
