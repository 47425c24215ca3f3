// Building blocks of the register-tiled row kernels (layer/RMS/group norm forward and backward,
// softmax backward): each row is split over a group of threads that keep it in registers as
// 16-byte packs, so the row is read from memory once.
//
//   RowTiling t = row_tiling(row_size, 16 / sizeof(T), /*max_group=*/1024);   // host: geometry
//   Pack<bf16, 8> p = reinterpret_cast<const Pack<bf16, 8>*>(row)[unit];      // one 16-byte load
//   float v = to_compute(p.v[0]);   p.v[0] = from_compute<bf16>(v);            // fast conversions
//   group_sum<kGroup>(sums, shared);                                          // sum over the row's threads
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "runtime/dtype.h"

namespace wick::cuda {

// Elements per thread of a row tile (kept in registers): 16 bytes of bf16 twice, of f32 four times.
inline constexpr int kTileElements = 16;

// N elements loaded or stored as one access (N * sizeof(T) <= 16 and the address so aligned).
template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

__device__ __forceinline__ float to_compute(bf16 v) { return __uint_as_float(static_cast<uint32_t>(v.bits) << 16); }
__device__ __forceinline__ float to_compute(f16 v) { return __half2float(__ushort_as_half(v.bits)); }
__device__ __forceinline__ float to_compute(float v) { return v; }
__device__ __forceinline__ double to_compute(double v) { return v; }

// Round to nearest even into T (the hardware conversions; the same results as convert<T>).
template <typename T>
__device__ __forceinline__ T from_compute(compute_t<T> v) {
  if constexpr (std::is_same_v<T, bf16>) {
    bf16 out;
    out.bits = __bfloat16_as_ushort(__float2bfloat16_rn(v));
    return out;
  } else if constexpr (std::is_same_v<T, f16>) {
    f16 out;
    out.bits = __half_as_ushort(__float2half_rn(v));
    return out;
  } else {
    return v;
  }
}

// kVec consecutive values of an S array starting at element `first` (a multiple of kVec), in
// accesses of at most 16 bytes; `data` is 16-byte aligned whenever kVec * sizeof(S) >= 16.
template <int kVec, typename S>
__device__ __forceinline__ void load_values(const S* data, int64_t first, S (&out)[kVec]) {
  constexpr int chunk = kVec * sizeof(S) <= 16 ? kVec : static_cast<int>(16 / sizeof(S));
#pragma unroll
  for (int c = 0; c < kVec / chunk; ++c) {
    Pack<S, chunk> pack = *reinterpret_cast<const Pack<S, chunk>*>(data + first + c * chunk);
#pragma unroll
    for (int e = 0; e < chunk; ++e) out[c * chunk + e] = pack.v[e];
  }
}

// Sums N values over the threads that share a row, in a fixed order; every one of them gets the
// totals. kGroup in {2, 8, 32}: that many consecutive lanes of a warp (blockDim.x == kGroup).
// kGroup == 0: the blockDim.x threads (a multiple of 32) of row slot threadIdx.y, through
// `shared` (32 * N values); then every thread of the block must call it (it synchronizes).
template <int kGroup, int N, typename S>
__device__ __forceinline__ void group_sum(S (&values)[N], S* shared) {
  constexpr int width = kGroup == 0 ? 32 : kGroup;
#pragma unroll
  for (int offset = width / 2; offset > 0; offset /= 2) {
#pragma unroll
    for (int k = 0; k < N; ++k) values[k] += __shfl_xor_sync(0xffffffffu, values[k], offset);
  }
  if constexpr (kGroup == 0) {
    int n_warps = blockDim.x / 32;
    int first_warp = threadIdx.y * n_warps;  // the slot's warps are consecutive in the block
    int warp = first_warp + threadIdx.x / 32;
    __syncthreads();  // the previous call's readers are done with `shared`
    if (threadIdx.x % 32 == 0) {
#pragma unroll
      for (int k = 0; k < N; ++k) shared[warp * N + k] = values[k];
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < N; ++k) values[k] = S(0);
    for (int w = 0; w < n_warps; ++w) {
#pragma unroll
      for (int k = 0; k < N; ++k) values[k] += shared[(first_warp + w) * N + k];
    }
  }
}

// ---- host side: the geometry of a launch ----

// Rows of row_size elements in units of `vec` elements (vec divides row_size): each thread holds
// `items` = kTileElements / vec units; `group` threads share a row (2, 8 or 32 lanes of a warp, or
// a multiple of 32 up to max_group); fits is false when the row needs more than max_group threads.
struct RowTiling {
  int64_t units = 0;
  int items = 0, group = 0;
  bool fits = false;
};

inline RowTiling row_tiling(int64_t row_size, int vec, int max_group) {
  RowTiling t;
  t.units = row_size / vec;
  t.items = kTileElements / vec;
  int64_t threads = (t.units + t.items - 1) / t.items;
  if (threads <= 2) {
    t.group = 2;
  } else if (threads <= 8) {
    t.group = 8;
  } else if (threads <= 32) {
    t.group = 32;
  } else {
    t.group = static_cast<int>((threads + 31) / 32 * 32 <= max_group ? (threads + 31) / 32 * 32 : 0);
  }
  t.fits = t.group > 0;
  return t;
}

// The vector width for rows of T: 16 bytes when every pointer is 16-byte aligned and each row
// starts on a 16-byte boundary, else 1.
template <typename T>
inline int row_vector_width(int64_t row_size, std::initializer_list<const void*> pointers) {
  constexpr int vec = static_cast<int>(16 / sizeof(T));
  if (row_size % vec != 0) return 1;
  for (const void* p : pointers)
    if (p && reinterpret_cast<uintptr_t>(p) % 16 != 0) return 1;
  return vec;
}

// Calls fn(std::integral_constant<int, G>{}) for the tiling's group: 2, 8, 32, or 0 (block-wide).
template <typename Fn>
void with_group(const RowTiling& t, Fn&& fn) {
  switch (t.group) {
    case 2: fn(std::integral_constant<int, 2>{}); break;
    case 8: fn(std::integral_constant<int, 8>{}); break;
    case 32: fn(std::integral_constant<int, 32>{}); break;
    default: fn(std::integral_constant<int, 0>{}); break;
  }
}

}  // namespace wick::cuda
