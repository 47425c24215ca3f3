#include <cuda_runtime.h>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/launch.cuh"
#include "runtime/cuda/warp_reduce.cuh"
#include "runtime/cuda/norm_backward.h"
#include "runtime/device.h"
#include "runtime/kernel_args.h"
#include "runtime/memory.h"

namespace wick::cuda {
namespace {

// ---- kernels ----

template <typename T, typename S>
__device__ __forceinline__ S load(const T* data, int64_t i) {
  return static_cast<S>(static_cast<compute_t<T>>(data[i]));
}

// grad_x = rstd * (g w - mean(g w) - xhat * mean(g w xhat)) per row (no mean(g w) for RMS).
template <typename T, typename S, int kThreads>
__global__ void grad_x_kernel(NormProblem p, const T* grad_y, const T* x, const S* mean, const S* rstd,
                              const S* weight, T* grad_x) {
  __shared__ S shared[32];
  int rows_per_block = blockDim.x / kThreads;
  int64_t row = int64_t(blockIdx.x) * rows_per_block + threadIdx.x / kThreads;
  int lane = threadIdx.x % kThreads;
  if (row >= p.rows) return;  // uniform per row group (a whole warp, or the whole block)
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
    out[j] = convert<T>(static_cast<compute_t<T>>(row_rstd * (gw - mean_gw - xhat * mean_gw_xhat)));
  }
}

constexpr int kTileColumns = 32, kTileRows = 8;

// Layer/RMS norm partials: block (x = column tile, y = chunk of rows) sums g * xhat and g over its
// rows for 32 columns; threadIdx.y strides the rows, then a fixed-order shared reduction.
// partial_w / partial_b [n_chunks, row_size].
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

// grad_weight[c] / grad_bias[c] = sum over the n_parts partials of channel c, in order.
template <typename S>
__global__ void sum_partials_kernel(const S* partial_w, const S* partial_b, int64_t n_parts, int64_t n_channels,
                                    S* grad_weight, S* grad_bias) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < n_channels;
       c += int64_t(gridDim.x) * blockDim.x) {
    S sum_w = S(0), sum_b = S(0);
    for (int64_t k = 0; k < n_parts; ++k) {
      sum_w += partial_w[k * n_channels + c];
      sum_b += partial_b[k * n_channels + c];
    }
    if (grad_weight) grad_weight[c] = sum_w;
    if (grad_bias) grad_bias[c] = sum_b;
  }
}

// ---- launchers ----

template <typename T, typename S>
void launch_grad_x(const NormProblem& p, const void* grad_y, const void* x, const void* mean, const void* rstd,
                   const void* weight, void* grad_x, cudaStream_t stream) {
  auto args = [&](auto kernel, int threads, int64_t blocks) {
    kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(
        p, static_cast<const T*>(grad_y), static_cast<const T*>(x), static_cast<const S*>(mean),
        static_cast<const S*>(rstd), static_cast<const S*>(weight), static_cast<T*>(grad_x));
    CUDA_CHECK_LAUNCH();
  };
  if (p.row_size <= 1024) {
    constexpr int rows_per_block = 8;  // one warp per row, 256 threads per block
    args(grad_x_kernel<T, S, 32>, 32 * rows_per_block, (p.rows + rows_per_block - 1) / rows_per_block);
  } else if (p.row_size <= 16384) {
    args(grad_x_kernel<T, S, 256>, 256, p.rows);
  } else {
    args(grad_x_kernel<T, S, 1024>, 1024, p.rows);
  }
}

template <typename T, typename S>
void launch_affine_grads(const NormProblem& p, const void* grad_y, const void* x, const void* mean, const void* rstd,
                         void* grad_weight, void* grad_bias, cudaStream_t stream) {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  Device where = Device::cuda(device);
  Stream on{where, stream};
  bool grouped = p.channels_per_group != 0;
  int64_t n_channels = grouped ? p.groups * p.channels_per_group : p.row_size;
  if (n_channels == 0) return;
  int64_t n_parts = 0, chunk_rows = 0;
  if (grouped) {
    n_parts = p.rows / p.groups;  // samples
  } else {
    // About 256 chunks of rows: enough blocks to fill the GPU, few partials to sum.
    chunk_rows = (p.rows + 255) / 256;
    if (chunk_rows < kTileRows) chunk_rows = kTileRows;
    n_parts = (p.rows + chunk_rows - 1) / chunk_rows;
  }
  S* partials = nullptr;
  size_t bytes = static_cast<size_t>(2 * n_parts * n_channels) * sizeof(S);
  if (n_parts > 0) {
    partials = static_cast<S*>(allocate_bytes(where, bytes, on));
    const T* g = static_cast<const T*>(grad_y);
    const T* in = static_cast<const T*>(x);
    const S* m = static_cast<const S*>(mean);
    const S* r = static_cast<const S*>(rstd);
    if (grouped) {
      channel_partials_kernel<T, S><<<static_cast<unsigned>(n_parts * n_channels), kGroupThreads, 0, stream>>>(
          p, g, in, m, r, partials, partials + n_parts * n_channels);
    } else {
      dim3 grid(static_cast<unsigned>((n_channels + kTileColumns - 1) / kTileColumns), static_cast<unsigned>(n_parts));
      column_partials_kernel<T, S><<<grid, dim3(kTileColumns, kTileRows), 0, stream>>>(
          p, g, in, m, r, chunk_rows, partials, partials + n_parts * n_channels);
    }
    CUDA_CHECK_LAUNCH();
  }
  // With no rows (n_parts == 0) this writes zeros.
  sum_partials_kernel<S><<<grid_for(n_channels), block_size, 0, stream>>>(
      partials, partials ? partials + n_parts * n_channels : nullptr, n_parts, n_channels,
      static_cast<S*>(grad_weight), static_cast<S*>(grad_bias));
  CUDA_CHECK_LAUNCH();
  if (partials) free_bytes(where, partials, bytes, on);
}

template <typename T, typename S>
void backward_typed(const NormProblem& p, const void* grad_y, const void* x, const void* mean, const void* rstd,
                    const void* weight, void* grad_x, void* grad_weight, void* grad_bias, cudaStream_t stream) {
  if (grad_x && p.rows > 0) launch_grad_x<T, S>(p, grad_y, x, mean, rstd, weight, grad_x, stream);
  if (grad_weight || grad_bias) launch_affine_grads<T, S>(p, grad_y, x, mean, rstd, grad_weight, grad_bias, stream);
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
