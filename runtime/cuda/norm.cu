#include <cuda_runtime.h>

#include <algorithm>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/launch.cuh"
#include "runtime/cuda/norm.h"
#include "runtime/cuda/row_tiles.cuh"
#include "runtime/cuda/warp_reduce.cuh"
#include "runtime/device.h"
#include "runtime/kernel_args.h"
#include "runtime/memory.h"

namespace wick::cuda {
namespace {

// ---- kernels ----

// Register-tiled rows: row slot threadIdx.y of block blockIdx.x normalizes row
// blockIdx.x * blockDim.y + threadIdx.y; its blockDim.x threads (kGroup, or the block width when
// kGroup is 0) hold the row as kItems packs of kVec elements each (unit u = i * group + lane), so
// x is read once; mean, then the centred squares, are summed over the held values.
template <typename T, typename S, int kVec, int kItems, int kGroup>
__global__ void __launch_bounds__(1024)
    normalize_tiled_kernel(NormProblem p, const T* x, const S* weight, const S* bias, T* y, S* mean_out,
                           S* rstd_out) {
  __shared__ S shared[32];
  const int group = kGroup ? kGroup : static_cast<int>(blockDim.x);
  const int lane = threadIdx.x;
  const int64_t row = int64_t(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool valid = row < p.rows;  // invalid slots still join the block-wide sums
  const int64_t d = p.row_size, units = d / kVec;
  const bool direct = p.groups == 1 && p.inner == 1;  // the affine channel of element j is j
  using Vec = Pack<T, kVec>;
  const Vec* in = reinterpret_cast<const Vec*>(x + (valid ? row : 0) * d);

  S v[kItems][kVec];
  S sums[1] = {S(0)};
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    int64_t u = int64_t(i) * group + lane;
    if (valid && u < units) {
      Vec pack = in[u];
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        v[i][e] = static_cast<S>(to_compute(pack.v[e]));
        sums[0] += v[i][e];
      }
    } else {
#pragma unroll
      for (int e = 0; e < kVec; ++e) v[i][e] = S(0);
    }
  }
  S mean = S(0);
  if (p.subtract_mean) {
    group_sum<kGroup>(sums, shared);
    mean = sums[0] / static_cast<S>(d);
  }
  S squares[1] = {S(0)};
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    if (valid && int64_t(i) * group + lane < units) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        S centered = v[i][e] - mean;
        squares[0] += centered * centered;
      }
    }
  }
  group_sum<kGroup>(squares, shared);
  if (!valid) return;  // no block-wide sums follow
  S rstd = S(1) / sqrt(squares[0] / static_cast<S>(d) + static_cast<S>(p.eps));
  if (lane == 0) {
    if (mean_out) mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
  Vec* out = reinterpret_cast<Vec*>(y + row * d);
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    int64_t u = int64_t(i) * group + lane;
    if (u >= units) continue;
    S w[kVec], b[kVec];
    if (direct) {
      if (weight) load_values<kVec>(weight, u * kVec, w);
      if (bias) load_values<kVec>(bias, u * kVec, b);
    } else {
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        int64_t channel = p.channel_of(row, u * kVec + e);
        w[e] = weight ? weight[channel] : S(1);
        b[e] = bias ? bias[channel] : S(0);
      }
    }
    Vec pack;
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      S value = (v[i][e] - mean) * rstd;
      if (weight) value *= w[e];
      if (bias) value += b[e];
      pack.v[e] = from_compute<T>(static_cast<compute_t<T>>(value));
    }
    out[u] = pack;
  }
}

// Rows too long for registers: kThreads threads per row stream it from memory three times
// (mean, centred squares, output).
template <typename T, typename S, int kThreads>
__global__ void normalize_streamed_kernel(NormProblem p, const T* x, const S* weight, const S* bias, T* y,
                                          S* mean_out, S* rstd_out) {
  __shared__ S shared[32];
  int64_t row = blockIdx.x;
  int lane = threadIdx.x;
  int64_t d = p.row_size;
  const T* in = x + row * d;
  T* out = y + row * d;
  S mean = S(0);
  if (p.subtract_mean) {
    S sum = S(0);
    for (int64_t j = lane; j < d; j += kThreads) sum += static_cast<S>(to_compute(in[j]));
    mean = row_sum<kThreads>(sum, shared) / static_cast<S>(d);
  }
  S squares = S(0);
  for (int64_t j = lane; j < d; j += kThreads) {
    S centered = static_cast<S>(to_compute(in[j])) - mean;
    squares += centered * centered;
  }
  squares = row_sum<kThreads>(squares, shared);
  S rstd = S(1) / sqrt(squares / static_cast<S>(d) + static_cast<S>(p.eps));
  if (lane == 0) {
    if (mean_out) mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
  for (int64_t j = lane; j < d; j += kThreads) {
    S value = (static_cast<S>(to_compute(in[j])) - mean) * rstd;
    if (weight || bias) {
      int64_t channel = p.channel_of(row, j);
      if (weight) value *= weight[channel];
      if (bias) value += bias[channel];
    }
    out[j] = from_compute<T>(static_cast<compute_t<T>>(value));
  }
}

// ---- launchers ----

template <typename T, typename S, int kVec>
void launch_tiled(const NormProblem& p, const RowTiling& t, const T* x, const S* weight, const S* bias, T* y,
                  S* mean, S* rstd, cudaStream_t stream) {
  with_group(t, [&](auto group_constant) {
    constexpr int kGroup = decltype(group_constant)::value;
    // Sub-warp and warp groups: 256 threads per block. Block-wide rows: one row per block.
    int slots = kGroup ? 256 / kGroup : 1;
    dim3 block(static_cast<unsigned>(t.group), static_cast<unsigned>(slots));
    int64_t blocks = (p.rows + slots - 1) / slots;
    normalize_tiled_kernel<T, S, kVec, kTileElements / kVec, kGroup>
        <<<static_cast<unsigned>(blocks), block, 0, stream>>>(p, x, weight, bias, y, mean, rstd);
    CUDA_CHECK_LAUNCH();
  });
}

template <typename T, typename S>
void launch_normalize(const NormProblem& p, const void* x_in, const void* weight_in, const void* bias_in, void* y_in,
                      void* mean_in, void* rstd_in, cudaStream_t stream) {
  auto x = static_cast<const T*>(x_in);
  auto weight = static_cast<const S*>(weight_in);
  auto bias = static_cast<const S*>(bias_in);
  auto y = static_cast<T*>(y_in);
  auto mean = static_cast<S*>(mean_in);
  auto rstd = static_cast<S*>(rstd_in);
  bool direct = p.groups == 1 && p.inner == 1;
  int vec = row_vector_width<T>(p.row_size, {x, y, direct ? weight : nullptr, direct ? bias : nullptr});
  constexpr int kWide = static_cast<int>(16 / sizeof(T));
  RowTiling tiling = row_tiling(p.row_size, vec, /*max_group=*/1024);
  if (tiling.fits) {
    if (vec == kWide)
      launch_tiled<T, S, kWide>(p, tiling, x, weight, bias, y, mean, rstd, stream);
    else
      launch_tiled<T, S, 1>(p, tiling, x, weight, bias, y, mean, rstd, stream);
    return;
  }
  normalize_streamed_kernel<T, S, 1024>
      <<<static_cast<unsigned>(p.rows), 1024, 0, stream>>>(p, x, weight, bias, y, mean, rstd);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void normalize_rows(const NormProblem& problem, DType dtype, const void* x, const void* weight, const void* bias,
                    void* y, void* mean, void* rstd, void* stream) {
  if (problem.rows == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case DType::F64: launch_normalize<double, double>(problem, x, weight, bias, y, mean, rstd, s); break;
    case DType::BF16: launch_normalize<bf16, float>(problem, x, weight, bias, y, mean, rstd, s); break;
    case DType::F16: launch_normalize<f16, float>(problem, x, weight, bias, y, mean, rstd, s); break;
    default: launch_normalize<float, float>(problem, x, weight, bias, y, mean, rstd, s); break;
  }
}

// ---- gradients ----

namespace {

// ---- kernels ----

template <typename T, typename S>
__device__ __forceinline__ S load(const T* data, int64_t i) {
  return static_cast<S>(to_compute(data[i]));
}

// grad_x = rstd * (g w - mean(g w) - xhat * mean(g w xhat)) per row (no mean(g w) for RMS), with
// rows held in registers as in the forward (row slot threadIdx.y, blockDim.x threads per row, unit
// u = i * group + lane), so grad_y and x are read once. Block b handles rows
// (k * gridDim.x + b) * blockDim.y + threadIdx.y for k < iterations. With partial_w / partial_b
// (the affine channel of element j is j), each thread also sums g * xhat and g of its columns over
// those rows; the block's slots add theirs in slot order (through 2 * row_size S of dynamic shared
// memory when blockDim.y > 1) into row blockIdx.x of partial_w / partial_b [gridDim.x, row_size].
template <typename T, typename S, int kVec, int kItems, int kGroup>
__global__ void __launch_bounds__(512)
    backward_tiled_kernel(NormProblem p, const T* grad_y, const T* x, const S* mean, const S* rstd, const S* weight,
                          T* grad_x, S* partial_w, S* partial_b, int64_t iterations) {
  extern __shared__ __align__(16) unsigned char slot_sums[];
  __shared__ S shared[64];
  const int group = kGroup ? kGroup : static_cast<int>(blockDim.x);
  const int lane = threadIdx.x;
  const int64_t d = p.row_size, units = d / kVec;
  const bool direct = p.groups == 1 && p.inner == 1;
  const bool affine = partial_w != nullptr;
  using Vec = Pack<T, kVec>;
  S acc_w[kItems][kVec], acc_b[kItems][kVec];
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
#pragma unroll
    for (int e = 0; e < kVec; ++e) acc_w[i][e] = acc_b[i][e] = S(0);
  }
  for (int64_t k = 0; k < iterations; ++k) {
    const int64_t row = (k * gridDim.x + blockIdx.x) * blockDim.y + threadIdx.y;
    const bool valid = row < p.rows;  // invalid slots still join the block-wide sums
    const int64_t at = (valid ? row : 0) * d;
    const Vec* g_in = reinterpret_cast<const Vec*>(grad_y + at);
    const Vec* x_in = reinterpret_cast<const Vec*>(x + at);
    const S row_mean = valid && mean ? mean[row] : S(0), row_rstd = valid ? rstd[row] : S(0);
    S gw[kItems][kVec], xhat[kItems][kVec];
    S sums[2] = {S(0), S(0)};  // sum g w, sum g w xhat
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      int64_t u = int64_t(i) * group + lane;
      if (valid && u < units) {
        Vec g_pack = g_in[u], x_pack = x_in[u];
        S w[kVec];
        if (!weight) {
#pragma unroll
          for (int e = 0; e < kVec; ++e) w[e] = S(1);
        } else if (direct) {
          load_values<kVec>(weight, u * kVec, w);
        } else {
#pragma unroll
          for (int e = 0; e < kVec; ++e) w[e] = weight[p.channel_of(row, u * kVec + e)];
        }
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          S g = static_cast<S>(to_compute(g_pack.v[e]));
          xhat[i][e] = (static_cast<S>(to_compute(x_pack.v[e])) - row_mean) * row_rstd;
          if (affine) {
            acc_w[i][e] += g * xhat[i][e];
            acc_b[i][e] += g;
          }
          gw[i][e] = g * w[e];
          sums[0] += gw[i][e];
          sums[1] += gw[i][e] * xhat[i][e];
        }
      } else {
#pragma unroll
        for (int e = 0; e < kVec; ++e) gw[i][e] = xhat[i][e] = S(0);
      }
    }
    group_sum<kGroup>(sums, shared);
    if (!valid || !grad_x) continue;
    const S mean_gw = p.subtract_mean ? sums[0] / static_cast<S>(d) : S(0);
    const S mean_gw_xhat = sums[1] / static_cast<S>(d);
    Vec* out = reinterpret_cast<Vec*>(grad_x + at);
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      int64_t u = int64_t(i) * group + lane;
      if (u >= units) continue;
      Vec pack;
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        S value = row_rstd * (gw[i][e] - mean_gw - xhat[i][e] * mean_gw_xhat);
        pack.v[e] = from_compute<T>(static_cast<compute_t<T>>(value));
      }
      out[u] = pack;
    }
  }
  if (!affine) return;
  S* part_w = partial_w + int64_t(blockIdx.x) * d;
  S* part_b = partial_b + int64_t(blockIdx.x) * d;
  if (blockDim.y == 1) {
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      int64_t u = int64_t(i) * group + lane;
      if (u >= units) continue;
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        part_w[u * kVec + e] = acc_w[i][e];
        part_b[u * kVec + e] = acc_b[i][e];
      }
    }
    return;
  }
  S* sum_w = reinterpret_cast<S*>(slot_sums);
  S* sum_b = sum_w + d;
  for (int slot = 0; slot < static_cast<int>(blockDim.y); ++slot) {
    if (threadIdx.y == slot) {
#pragma unroll
      for (int i = 0; i < kItems; ++i) {
        int64_t u = int64_t(i) * group + lane;
        if (u >= units) continue;
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          int64_t j = u * kVec + e;
          sum_w[j] = (slot ? sum_w[j] : S(0)) + acc_w[i][e];
          sum_b[j] = (slot ? sum_b[j] : S(0)) + acc_b[i][e];
        }
      }
    }
    __syncthreads();
  }
  for (int64_t j = threadIdx.y * blockDim.x + threadIdx.x; j < d; j += blockDim.x * blockDim.y) {
    part_w[j] = sum_w[j];
    part_b[j] = sum_b[j];
  }
}

// Rows too long for registers: kThreads threads per row stream grad_y and x twice.
template <typename T, typename S, int kThreads>
__global__ void grad_x_streamed_kernel(NormProblem p, const T* grad_y, const T* x, const S* mean, const S* rstd,
                                       const S* weight, T* grad_x) {
  __shared__ S shared[32];
  int64_t row = blockIdx.x;
  int lane = threadIdx.x;
  int64_t d = p.row_size;
  const T* g = grad_y + row * d;
  const T* in = x + row * d;
  S row_mean = mean ? mean[row] : S(0), row_rstd = rstd[row];
  S sum_gw = S(0), sum_gw_xhat = S(0);
  for (int64_t j = lane; j < d; j += kThreads) {
    S gw = load<T, S>(g, j) * (weight ? weight[p.channel_of(row, j)] : S(1));
    sum_gw += gw;
    sum_gw_xhat += gw * (load<T, S>(in, j) - row_mean) * row_rstd;
  }
  sum_gw = row_sum<kThreads>(sum_gw, shared);
  sum_gw_xhat = row_sum<kThreads>(sum_gw_xhat, shared);
  S mean_gw = p.subtract_mean ? sum_gw / static_cast<S>(d) : S(0);
  S mean_gw_xhat = sum_gw_xhat / static_cast<S>(d);
  T* out = grad_x + row * d;
  for (int64_t j = lane; j < d; j += kThreads) {
    S gw = load<T, S>(g, j) * (weight ? weight[p.channel_of(row, j)] : S(1));
    S xhat = (load<T, S>(in, j) - row_mean) * row_rstd;
    out[j] = from_compute<T>(static_cast<compute_t<T>>(row_rstd * (gw - mean_gw - xhat * mean_gw_xhat)));
  }
}

constexpr int kTileColumns = 32, kTileRows = 8;

// Layer/RMS norm partials for rows streamed from memory: block (x = column tile, y = chunk of
// rows) sums g * xhat and g over its rows for 32 columns; threadIdx.y strides the rows, then a
// fixed-order shared reduction. partial_w / partial_b [n_chunks, row_size].
template <typename T, typename S>
__global__ void column_partials_kernel(NormProblem p, const T* grad_y, const T* x, const S* mean, const S* rstd,
                                       int64_t chunk_rows, S* partial_w, S* partial_b) {
  __shared__ S shared_w[kTileRows][kTileColumns];
  __shared__ S shared_b[kTileRows][kTileColumns];
  int64_t j = int64_t(blockIdx.x) * kTileColumns + threadIdx.x;
  int64_t first = int64_t(blockIdx.y) * chunk_rows;
  int64_t last = first + chunk_rows < p.rows ? first + chunk_rows : p.rows;
  S sum_w = S(0), sum_b = S(0);
  if (j < p.row_size) {
    for (int64_t row = first + threadIdx.y; row < last; row += kTileRows) {
      S g = load<T, S>(grad_y, row * p.row_size + j);
      S row_mean = mean ? mean[row] : S(0);
      sum_w += g * (load<T, S>(x, row * p.row_size + j) - row_mean) * rstd[row];
      sum_b += g;
    }
  }
  shared_w[threadIdx.y][threadIdx.x] = sum_w;
  shared_b[threadIdx.y][threadIdx.x] = sum_b;
  __syncthreads();
  if (threadIdx.y == 0 && j < p.row_size) {
    for (int k = 1; k < kTileRows; ++k) {
      sum_w += shared_w[k][threadIdx.x];
      sum_b += shared_b[k][threadIdx.x];
    }
    partial_w[int64_t(blockIdx.y) * p.row_size + j] = sum_w;
    partial_b[int64_t(blockIdx.y) * p.row_size + j] = sum_b;
  }
}

constexpr int kGroupThreads = 256;

// Group norm partials: block (sample, channel) sums g * xhat and g over the channel's `inner`
// elements of that sample. partial_w / partial_b [n_samples, n_channels].
template <typename T, typename S>
__global__ void channel_partials_kernel(NormProblem p, const T* grad_y, const T* x, const S* mean, const S* rstd,
                                        S* partial_w, S* partial_b) {
  __shared__ S shared[32];
  int64_t n_channels = p.groups * p.channels_per_group;
  int64_t sample = blockIdx.x / n_channels, c = blockIdx.x % n_channels;
  int64_t row = sample * p.groups + c / p.channels_per_group;
  int64_t base = row * p.row_size + (c % p.channels_per_group) * p.inner;
  S row_mean = mean[row], row_rstd = rstd[row];
  S sum_w = S(0), sum_b = S(0);
  for (int64_t i = threadIdx.x; i < p.inner; i += kGroupThreads) {
    S g = load<T, S>(grad_y, base + i);
    sum_w += g * (load<T, S>(x, base + i) - row_mean) * row_rstd;
    sum_b += g;
  }
  sum_w = row_sum<kGroupThreads>(sum_w, shared);
  sum_b = row_sum<kGroupThreads>(sum_b, shared);
  if (threadIdx.x == 0) {
    partial_w[blockIdx.x] = sum_w;
    partial_b[blockIdx.x] = sum_b;
  }
}

// grad_weight[c] / grad_bias[c] = sum over the n_parts partials of channel c: block (32 columns,
// 32 strides of parts), then a fixed-order shared reduction over the strides.
template <typename S>
__global__ void sum_partials_kernel(const S* partial_w, const S* partial_b, int64_t n_parts, int64_t n_channels,
                                    S* grad_weight, S* grad_bias) {
  __shared__ S shared_w[32][33];
  __shared__ S shared_b[32][33];
  int64_t c = int64_t(blockIdx.x) * 32 + threadIdx.x;
  S sum_w = S(0), sum_b = S(0);
  if (c < n_channels) {
    for (int64_t k = threadIdx.y; k < n_parts; k += 32) {
      sum_w += partial_w[k * n_channels + c];
      sum_b += partial_b[k * n_channels + c];
    }
  }
  shared_w[threadIdx.y][threadIdx.x] = sum_w;
  shared_b[threadIdx.y][threadIdx.x] = sum_b;
  __syncthreads();
  if (threadIdx.y != 0 || c >= n_channels) return;
  for (int k = 1; k < 32; ++k) {
    sum_w += shared_w[k][threadIdx.x];
    sum_b += shared_b[k][threadIdx.x];
  }
  if (grad_weight) grad_weight[c] = sum_w;
  if (grad_bias) grad_bias[c] = sum_b;
}

// ---- launchers ----

// A stream-ordered scratch buffer of `bytes` on the current device (nullptr for none).
template <typename S>
S* allocate_scratch(size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return nullptr;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  return static_cast<S*>(allocate_bytes(Device::cuda(device), bytes, Stream{Device::cuda(device), stream}));
}

void free_scratch(void* data, size_t bytes, cudaStream_t stream) {
  if (!data) return;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  free_bytes(Device::cuda(device), data, bytes, Stream{Device::cuda(device), stream});
}

template <typename S>
void launch_sum_partials(const S* partial_w, const S* partial_b, int64_t n_parts, int64_t n_channels, S* grad_weight,
                         S* grad_bias, cudaStream_t stream) {
  if (n_channels == 0) return;
  // With no parts this writes zeros.
  sum_partials_kernel<S><<<static_cast<unsigned>((n_channels + 31) / 32), dim3(32, 32), 0, stream>>>(
      partial_w, partial_b, n_parts, n_channels, grad_weight, grad_bias);
  CUDA_CHECK_LAUNCH();
}

// grad_x (when asked) and, with `fused`, grad_weight / grad_bias from registers-held rows.
template <typename T, typename S, int kVec>
void launch_tiled(const NormProblem& p, const RowTiling& t, const T* grad_y, const T* x, const S* mean, const S* rstd,
                  const S* weight, T* grad_x, bool fused, S* grad_weight, S* grad_bias, cudaStream_t stream) {
  with_group(t, [&](auto group_constant) {
    constexpr int kGroup = decltype(group_constant)::value;
    auto kernel = backward_tiled_kernel<T, S, kVec, kTileElements / kVec, kGroup>;
    int64_t d = p.row_size;
    // Sub-warp and warp groups: 256 threads per block. Block-wide rows: one row slot per block, or
    // two when fused (below).
    int slots = kGroup ? 256 / kGroup : 1;
    size_t shared_bytes = 0;
    int per_sm = 0;
    auto blocks_per_sm = [&](int n_slots, size_t bytes) {
      int n = 0;
      CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, t.group * n_slots, bytes));
      return std::max(1, n);
    };
    if (fused) {
      shared_bytes = slots > 1 ? static_cast<size_t>(2 * d) * sizeof(S) : 0;
      per_sm = blocks_per_sm(slots, shared_bytes);
      // Block-wide rows: two row slots per block (half the partial rows) when that keeps as many
      // threads resident and their column sums fit in 48 KiB of shared memory.
      size_t two_slot_bytes = static_cast<size_t>(2 * d) * sizeof(S);
      if (!kGroup && 2 * t.group <= 512 && two_slot_bytes <= 48 * 1024) {
        int per_sm_two = blocks_per_sm(2, two_slot_bytes);
        if (2 * per_sm_two >= per_sm) {
          slots = 2;
          shared_bytes = two_slot_bytes;
          per_sm = per_sm_two;
        }
      }
    }
    dim3 block(static_cast<unsigned>(t.group), static_cast<unsigned>(slots));
    int64_t row_blocks = (p.rows + slots - 1) / slots;
    int64_t grid = row_blocks, iterations = 1;
    if (fused) {
      // One resident wave of blocks, each over an equal share of rows: few partial rows to sum.
      int device = 0, n_sms = 0;
      CUDA_CHECK(cudaGetDevice(&device));
      CUDA_CHECK(cudaDeviceGetAttribute(&n_sms, cudaDevAttrMultiProcessorCount, device));
      int64_t wave = std::max<int64_t>(1, int64_t(n_sms) * per_sm);
      iterations = (row_blocks + wave - 1) / wave;
      grid = (row_blocks + iterations - 1) / iterations;
    }
    size_t bytes = fused ? static_cast<size_t>(2 * grid * d) * sizeof(S) : 0;
    S* partial_w = allocate_scratch<S>(bytes, stream);
    S* partial_b = partial_w ? partial_w + grid * d : nullptr;
    kernel<<<static_cast<unsigned>(grid), block, shared_bytes, stream>>>(p, grad_y, x, mean, rstd, weight, grad_x,
                                                                         partial_w, partial_b, iterations);
    CUDA_CHECK_LAUNCH();
    if (fused) launch_sum_partials<S>(partial_w, partial_b, grid, d, grad_weight, grad_bias, stream);
    free_scratch(partial_w, bytes, stream);
  });
}

template <typename T, typename S>
void launch_grad_x_streamed(const NormProblem& p, const T* grad_y, const T* x, const S* mean, const S* rstd,
                            const S* weight, T* grad_x, cudaStream_t stream) {
  grad_x_streamed_kernel<T, S, 1024>
      <<<static_cast<unsigned>(p.rows), 1024, 0, stream>>>(p, grad_y, x, mean, rstd, weight, grad_x);
  CUDA_CHECK_LAUNCH();
}

// grad_weight / grad_bias from a separate pass over grad_y and x (group norm, or rows too long
// for registers).
template <typename T, typename S>
void launch_affine_streamed(const NormProblem& p, const T* g, const T* in, const S* m, const S* r, S* grad_weight,
                            S* grad_bias, cudaStream_t stream) {
  bool grouped = p.channels_per_group != 0;
  int64_t n_channels = grouped ? p.groups * p.channels_per_group : p.row_size;
  if (n_channels == 0) return;
  int64_t n_parts = 0, chunk_rows = 0;
  if (grouped) {
    n_parts = p.rows / p.groups;  // samples
  } else {
    // About 256 chunks of rows: enough blocks to fill the GPU, few partials to sum.
    chunk_rows = std::max<int64_t>(kTileRows, (p.rows + 255) / 256);
    n_parts = (p.rows + chunk_rows - 1) / chunk_rows;
  }
  size_t bytes = static_cast<size_t>(2 * n_parts * n_channels) * sizeof(S);
  S* partial_w = allocate_scratch<S>(bytes, stream);
  S* partial_b = partial_w ? partial_w + n_parts * n_channels : nullptr;
  if (n_parts > 0) {
    if (grouped) {
      channel_partials_kernel<T, S><<<static_cast<unsigned>(n_parts * n_channels), kGroupThreads, 0, stream>>>(
          p, g, in, m, r, partial_w, partial_b);
    } else {
      dim3 grid(static_cast<unsigned>((n_channels + kTileColumns - 1) / kTileColumns), static_cast<unsigned>(n_parts));
      column_partials_kernel<T, S>
          <<<grid, dim3(kTileColumns, kTileRows), 0, stream>>>(p, g, in, m, r, chunk_rows, partial_w, partial_b);
    }
    CUDA_CHECK_LAUNCH();
  }
  launch_sum_partials<S>(partial_w, partial_b, n_parts, n_channels, grad_weight, grad_bias, stream);
  free_scratch(partial_w, bytes, stream);
}

template <typename T, typename S>
void backward_typed(const NormProblem& p, const void* grad_y_in, const void* x_in, const void* mean_in,
                    const void* rstd_in, const void* weight_in, void* grad_x_in, void* grad_weight_in,
                    void* grad_bias_in, cudaStream_t stream) {
  auto grad_y = static_cast<const T*>(grad_y_in);
  auto x = static_cast<const T*>(x_in);
  auto mean = static_cast<const S*>(mean_in);
  auto rstd = static_cast<const S*>(rstd_in);
  auto weight = static_cast<const S*>(weight_in);
  auto grad_x = static_cast<T*>(grad_x_in);
  auto grad_weight = static_cast<S*>(grad_weight_in);
  auto grad_bias = static_cast<S*>(grad_bias_in);
  bool direct = p.groups == 1 && p.inner == 1;
  bool affine = grad_weight || grad_bias;
  int vec = row_vector_width<T>(p.row_size, {grad_y, x, grad_x, direct ? weight : nullptr});
  constexpr int kWide = static_cast<int>(16 / sizeof(T));
  RowTiling tiling = row_tiling(p.row_size, vec, /*max_group=*/512);
  bool fused = affine && direct;
  if (p.rows > 0 && tiling.fits && (grad_x || fused)) {
    if (vec == kWide)
      launch_tiled<T, S, kWide>(p, tiling, grad_y, x, mean, rstd, weight, grad_x, fused, grad_weight, grad_bias,
                                stream);
    else
      launch_tiled<T, S, 1>(p, tiling, grad_y, x, mean, rstd, weight, grad_x, fused, grad_weight, grad_bias, stream);
    if (affine && !fused) launch_affine_streamed<T, S>(p, grad_y, x, mean, rstd, grad_weight, grad_bias, stream);
    return;
  }
  if (grad_x && p.rows > 0) launch_grad_x_streamed<T, S>(p, grad_y, x, mean, rstd, weight, grad_x, stream);
  if (affine) launch_affine_streamed<T, S>(p, grad_y, x, mean, rstd, grad_weight, grad_bias, stream);
}

}  // namespace

void normalize_rows_backward(const NormProblem& problem, DType dtype, const void* grad_y, const void* x,
                             const void* mean, const void* rstd, const void* weight, void* grad_x, void* grad_weight,
                             void* grad_bias, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case DType::F64:
      backward_typed<double, double>(problem, grad_y, x, mean, rstd, weight, grad_x, grad_weight, grad_bias, s);
      break;
    case DType::BF16:
      backward_typed<bf16, float>(problem, grad_y, x, mean, rstd, weight, grad_x, grad_weight, grad_bias, s);
      break;
    case DType::F16:
      backward_typed<f16, float>(problem, grad_y, x, mean, rstd, weight, grad_x, grad_weight, grad_bias, s);
      break;
    default:
      backward_typed<float, float>(problem, grad_y, x, mean, rstd, weight, grad_x, grad_weight, grad_bias, s);
      break;
  }
}
}  // namespace wick::cuda
