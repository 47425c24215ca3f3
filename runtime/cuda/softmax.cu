#include <cuda_runtime.h>

#include <type_traits>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/group_reduce.cuh"
#include "runtime/cuda/row_tiles.cuh"
#include "runtime/cuda/softmax.h"
#include "runtime/cuda/warp_reduce.cuh"
#include "runtime/kernel_args.h"
#include "runtime/ops/elementwise_math.h"
#include "runtime/ops/reduce_math.h"

namespace wick::cuda {
namespace {

// ---- kernels ----
// One row per group of threads (a warp, or the block for rows over 512), as
// runtime/cuda/group_reduce.cuh lays them out.

template <bool kLog, typename T, int kGroup>
__global__ void softmax_kernel(const T* x, T* out, int64_t n_rows, int64_t n) {
  using A = accumulate_t<T>;
  int64_t r = group_row<kGroup>();
  if (r >= n_rows) return;
  const T* row = x + r * n;
  T* result = out + r * n;
  int lane = threadIdx.x % kGroup;
  A m = lowest_value<A>();
  for (int64_t i = lane; i < n; i += kGroup) m = math::maximum(m, convert<A>(row[i]));
  m = group_reduce<kGroup>(m, MaxOp{});
  A s = A(0);
  for (int64_t i = lane; i < n; i += kGroup) s += math::exp(convert<A>(row[i]) - m);
  s = group_reduce<kGroup>(s, SumOp{});
  if constexpr (kLog) {
    A shift = m + math::log(s);
    for (int64_t i = lane; i < n; i += kGroup) result[i] = convert<T>(convert<A>(row[i]) - shift);
  } else {
    A inverse = A(1) / s;
    for (int64_t i = lane; i < n; i += kGroup) result[i] = convert<T>(math::exp(convert<A>(row[i]) - m) * inverse);
  }
}

}  // namespace

// ---- launchers ----

void softmax_rows(bool log, DType dtype, const void* x, void* out, int64_t n_rows, int64_t row_length,
                  void* stream) {
  if (n_rows == 0 || row_length == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<accumulate_t<T>>) {
      const T* in = static_cast<const T*>(x);
      T* result = static_cast<T*>(out);
      launch_rows(n_rows, row_length, [&](auto group_tag, unsigned blocks) {
        constexpr int kGroup = decltype(group_tag)::value;
        if (log)
          softmax_kernel<true, T, kGroup><<<blocks, threads_per_block, 0, s>>>(in, result, n_rows, row_length);
        else
          softmax_kernel<false, T, kGroup><<<blocks, threads_per_block, 0, s>>>(in, result, n_rows, row_length);
        CUDA_CHECK_LAUNCH();
      });
    }
  });
}

// ---- gradients ----

namespace {

// ---- kernels ----

// grad_x = y * (g - sum(g y)) per row, rows held in registers: row slot threadIdx.y of block
// blockIdx.x takes row blockIdx.x * blockDim.y + threadIdx.y; its blockDim.x threads (kGroup, or
// the block width when kGroup is 0) hold kItems packs of kVec elements (unit u = i * group + lane).
template <typename T, int kVec, int kItems, int kGroup>
__global__ void __launch_bounds__(1024)
    softmax_backward_tiled_kernel(const T* grad_y, const T* y, T* grad_x, int64_t n_rows, int64_t row_length) {
  using C = compute_t<T>;
  using Vec = Pack<T, kVec>;
  __shared__ C shared[32];
  const int group = kGroup ? kGroup : static_cast<int>(blockDim.x);
  const int lane = threadIdx.x;
  const int64_t row = int64_t(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool valid = row < n_rows;  // invalid slots still join the block-wide sum
  const int64_t units = row_length / kVec, at = (valid ? row : 0) * row_length;
  const Vec* g_in = reinterpret_cast<const Vec*>(grad_y + at);
  const Vec* y_in = reinterpret_cast<const Vec*>(y + at);
  C g[kItems][kVec], p[kItems][kVec];
  C dot[1] = {C(0)};
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    int64_t u = int64_t(i) * group + lane;
    if (valid && u < units) {
      Vec g_pack = g_in[u], y_pack = y_in[u];
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        g[i][e] = to_compute(g_pack.v[e]);
        p[i][e] = to_compute(y_pack.v[e]);
        dot[0] += g[i][e] * p[i][e];
      }
    } else {
#pragma unroll
      for (int e = 0; e < kVec; ++e) g[i][e] = p[i][e] = C(0);
    }
  }
  group_sum<kGroup>(dot, shared);
  if (!valid) return;
  Vec* out = reinterpret_cast<Vec*>(grad_x + at);
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    int64_t u = int64_t(i) * group + lane;
    if (u >= units) continue;
    Vec pack;
#pragma unroll
    for (int e = 0; e < kVec; ++e) pack.v[e] = from_compute<T>(p[i][e] * (g[i][e] - dot[0]));
    out[u] = pack;
  }
}

// Rows too long for registers: kThreads threads per row read grad_y and y twice.
template <typename T, int kThreads>
__global__ void softmax_backward_streamed_kernel(const T* grad_y, const T* y, T* grad_x, int64_t row_length) {
  using C = compute_t<T>;
  __shared__ C shared[32];
  const int64_t at = int64_t(blockIdx.x) * row_length;
  const T* g = grad_y + at;
  const T* p = y + at;
  C dot = C(0);
  for (int64_t j = threadIdx.x; j < row_length; j += kThreads) dot += to_compute(g[j]) * to_compute(p[j]);
  dot = row_sum<kThreads>(dot, shared);
  T* out = grad_x + at;
  for (int64_t j = threadIdx.x; j < row_length; j += kThreads)
    out[j] = from_compute<T>(to_compute(p[j]) * (to_compute(g[j]) - dot));
}

// ---- launchers ----

template <typename T, int kVec>
void launch_tiled(const RowTiling& t, const T* grad_y, const T* y, T* grad_x, int64_t n_rows, int64_t row_length,
                  cudaStream_t stream) {
  with_group(t, [&](auto group_constant) {
    constexpr int kGroup = decltype(group_constant)::value;
    // Sub-warp and warp groups: 256 threads per block. Block-wide rows: one row per block.
    int slots = kGroup ? 256 / kGroup : 1;
    dim3 block(static_cast<unsigned>(t.group), static_cast<unsigned>(slots));
    int64_t blocks = (n_rows + slots - 1) / slots;
    softmax_backward_tiled_kernel<T, kVec, kTileElements / kVec, kGroup>
        <<<static_cast<unsigned>(blocks), block, 0, stream>>>(grad_y, y, grad_x, n_rows, row_length);
    CUDA_CHECK_LAUNCH();
  });
}

template <typename T>
void launch_typed(const void* grad_y_in, const void* y_in, void* grad_x_in, int64_t n_rows, int64_t row_length,
                  cudaStream_t stream) {
  auto grad_y = static_cast<const T*>(grad_y_in);
  auto y = static_cast<const T*>(y_in);
  auto grad_x = static_cast<T*>(grad_x_in);
  int vec = row_vector_width<T>(row_length, {grad_y, y, grad_x});
  constexpr int kWide = static_cast<int>(16 / sizeof(T));
  RowTiling tiling = row_tiling(row_length, vec, /*max_group=*/1024);
  if (tiling.fits) {
    if (vec == kWide)
      launch_tiled<T, kWide>(tiling, grad_y, y, grad_x, n_rows, row_length, stream);
    else
      launch_tiled<T, 1>(tiling, grad_y, y, grad_x, n_rows, row_length, stream);
    return;
  }
  softmax_backward_streamed_kernel<T, 1024>
      <<<static_cast<unsigned>(n_rows), 1024, 0, stream>>>(grad_y, y, grad_x, row_length);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void softmax_backward_rows(DType dtype, const void* grad_y, const void* y, void* grad_x, int64_t n_rows,
                           int64_t row_length, void* stream) {
  if (n_rows == 0 || row_length == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case DType::F64: launch_typed<double>(grad_y, y, grad_x, n_rows, row_length, s); break;
    case DType::BF16: launch_typed<bf16>(grad_y, y, grad_x, n_rows, row_length, s); break;
    case DType::F16: launch_typed<f16>(grad_y, y, grad_x, n_rows, row_length, s); break;
    default: launch_typed<float>(grad_y, y, grad_x, n_rows, row_length, s); break;
  }
}

}  // namespace wick::cuda
