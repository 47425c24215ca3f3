#include <cuda_runtime.h>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/warp_reduce.cuh"
#include "runtime/cuda/norm.h"
#include "runtime/kernel_args.h"

namespace wick::cuda {

// ---- kernels ----

template <typename T, typename S, int kThreads>
__global__ void normalize_rows_kernel(NormProblem p, const T* x, const S* weight, const S* bias, T* y, S* mean_out,
                                      S* rstd_out) {
  __shared__ S shared[32];
  int rows_per_block = blockDim.x / kThreads;
  int64_t row = int64_t(blockIdx.x) * rows_per_block + threadIdx.x / kThreads;
  int lane = threadIdx.x % kThreads;
  if (row >= p.rows) return;  // uniform per row group (a whole warp, or the whole block)
  int64_t d = p.row_size;
  const T* in = x + row * d;
  T* out = y + row * d;

  S mean = S(0);
  if (p.subtract_mean) {
    S sum = S(0);
    for (int64_t j = lane; j < d; j += kThreads) sum += static_cast<S>(static_cast<compute_t<T>>(in[j]));
    mean = row_sum<kThreads>(sum, shared) / static_cast<S>(d);
  }
  S squares = S(0);
  for (int64_t j = lane; j < d; j += kThreads) {
    S centered = static_cast<S>(static_cast<compute_t<T>>(in[j])) - mean;
    squares += centered * centered;
  }
  squares = row_sum<kThreads>(squares, shared);
  S rstd = S(1) / sqrt(squares / static_cast<S>(d) + static_cast<S>(p.eps));
  if (lane == 0) {
    if (mean_out) mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
  for (int64_t j = lane; j < d; j += kThreads) {
    S value = (static_cast<S>(static_cast<compute_t<T>>(in[j])) - mean) * rstd;
    if (weight || bias) {
      int64_t channel = p.channel_of(row, j);
      if (weight) value *= weight[channel];
      if (bias) value += bias[channel];
    }
    out[j] = convert<T>(value);
  }
}

// ---- launchers ----
namespace {

template <typename T, typename S>
void launch_normalize(const NormProblem& p, const void* x, const void* weight, const void* bias, void* y, void* mean,
                      void* rstd, cudaStream_t stream) {
  auto args = [&](auto kernel, int threads, int64_t blocks) {
    kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(
        p, static_cast<const T*>(x), static_cast<const S*>(weight), static_cast<const S*>(bias), static_cast<T*>(y),
        static_cast<S*>(mean), static_cast<S*>(rstd));
    CUDA_CHECK_LAUNCH();
  };
  if (p.row_size <= 1024) {
    constexpr int rows_per_block = 8;  // one warp per row, 256 threads per block
    args(normalize_rows_kernel<T, S, 32>, 32 * rows_per_block, (p.rows + rows_per_block - 1) / rows_per_block);
  } else if (p.row_size <= 16384) {
    args(normalize_rows_kernel<T, S, 256>, 256, p.rows);
  } else {
    args(normalize_rows_kernel<T, S, 1024>, 1024, p.rows);
  }
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
