#include <cuda_runtime.h>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/norm.h"
#include "runtime/cuda/row_tiles.cuh"
#include "runtime/cuda/warp_reduce.cuh"
#include "runtime/kernel_args.h"

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

}  // namespace wick::cuda
