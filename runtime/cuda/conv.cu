#include <cuda_runtime.h>
#if WICK_HAS_CUDNN
#include <cudnn.h>
#endif

#include <map>
#include <mutex>
#include <tuple>

#include "runtime/cuda/conv.h"
#include "runtime/cuda/cuda_check.h"
#if WICK_HAS_CUDNN
#include "runtime/cuda/cudnn_conv.h"
#endif
#include "runtime/cuda/launch.cuh"
#include "runtime/cuda/matmul.h"
#include "runtime/kernel_args.h"
#include "runtime/memory.h"

namespace wick::cuda {

// ---- kernels ----

// y[item, channel, :] = bias[channel]; the convolution then accumulates onto it.
template <typename T>
__global__ void fill_bias_kernel(T* y, const T* bias, int64_t channels, int64_t plane, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = bias[(i / plane) % channels];
}

// One item's x [c, h, w] into columns [c * kh * kw, ho * wo]; padding reads as zero.
template <typename T>
__global__ void im2col_kernel(const T* x, T* columns, Conv2dGeometry g, int64_t n) {
  int64_t n_columns = g.ho * g.wo;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t row = i / n_columns, column = i % n_columns;
    int64_t channel = row / (g.kh * g.kw), ki = (row / g.kw) % g.kh, kj = row % g.kw;
    int64_t ih = (column / g.wo) * g.sh - g.ph + ki * g.dh;
    int64_t iw = (column % g.wo) * g.sw - g.pw + kj * g.dw;
    bool inside = ih >= 0 && ih < g.h && iw >= 0 && iw < g.w;
    columns[i] = inside ? x[(channel * g.h + ih) * g.w + iw] : convert<T>(0.0f);
  }
}

// ---- launchers ----
namespace {

template <typename T>
void fill_bias(const Conv2dGeometry& g, const void* bias, void* y, cudaStream_t stream) {
  int64_t plane = g.ho * g.wo, n = g.n * g.o * plane;
  fill_bias_kernel<T><<<grid_for(n), block_size, 0, stream>>>(static_cast<T*>(y), static_cast<const T*>(bias), g.o,
                                                               plane, n);
  CUDA_CHECK_LAUNCH();
}

#if WICK_HAS_CUDNN

struct ConvPlan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnConvolutionFwdAlgo_t algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  size_t workspace_bytes = 0;
  bool supported = false;  // false: cuDNN offers no suitable algorithm, use im2col + cuBLASLt
};

ConvPlan make_plan(cudnnHandle_t handle, const Conv2dGeometry& g, DType dtype) {
  ConvPlan plan;
  ConvDescriptors d = make_conv_descriptors(g, dtype, "conv2d");
  plan.x = d.x, plan.y = d.y, plan.w = d.w, plan.conv = d.conv;

  int n = 0, c = 0, h = 0, w = 0;
  CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(plan.conv, plan.x, plan.w, &n, &c, &h, &w));
  WICK_CHECK_KIND(Runtime, n == g.n && c == g.o && h == g.ho && w == g.wo, "conv2d: cuDNN output [", n, ", ", c,
                  ", ", h, ", ", w, "] differs from the expected [", g.n, ", ", g.o, ", ", g.ho, ", ", g.wo, "]");

  cudnnConvolutionFwdAlgoPerf_t results[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int n_results = 0;
  CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(handle, plan.x, plan.w, plan.conv, plan.y,
                                                     CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n_results, results));
  constexpr size_t max_workspace = size_t{1} << 30;
  for (int i = 0; i < n_results && !plan.supported; ++i) {
    const cudnnConvolutionFwdAlgoPerf_t& result = results[i];
    if (result.status != CUDNN_STATUS_SUCCESS || result.memory > max_workspace) continue;
    // Exact f32: only FMA kernels (CUDNN_DEFAULT_MATH permits TF32 on Ampere and later).
    if (dtype == DType::F32 && result.mathType != CUDNN_FMA_MATH) continue;
    plan.algo = result.algo;
    plan.workspace_bytes = result.memory;
    CUDNN_CHECK(cudnnSetConvolutionMathType(plan.conv, result.mathType));
    plan.supported = true;
  }
  return plan;
}

using PlanKey = std::tuple<int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                           int64_t, int64_t, int64_t, int64_t, int64_t>;

const ConvPlan& plan_for(int device, cudnnHandle_t handle, const Conv2dGeometry& g, DType dtype) {
  static std::mutex mutex;
  static std::map<PlanKey, ConvPlan> plans;  // descriptors live for the process
  PlanKey key{device, static_cast<int>(dtype), g.n, g.c, g.h, g.w, g.o, g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw,
              g.groups};
  std::lock_guard<std::mutex> lock(mutex);
  auto found = plans.find(key);
  if (found != plans.end()) return found->second;
  return plans.emplace(key, make_plan(handle, g, dtype)).first->second;
}

// False when cuDNN has no suitable algorithm for this problem (nothing was queued).
bool conv2d_cudnn(const Conv2dGeometry& g, DType dtype, const void* x, const void* weight, bool accumulate, void* y,
                  cudaStream_t stream) {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  cudnnHandle_t handle = cudnn_handle(device);
  CUDNN_CHECK(cudnnSetStream(handle, stream));
  const ConvPlan& plan = plan_for(device, handle, g, dtype);
  if (!plan.supported) return false;
  Device where = Device::cuda(device);
  Stream on{where, stream};
  void* workspace = plan.workspace_bytes > 0 ? allocate_bytes(where, plan.workspace_bytes, on) : nullptr;
  double alpha_f64 = 1.0, beta_f64 = accumulate ? 1.0 : 0.0;
  float alpha_f32 = 1.0f, beta_f32 = accumulate ? 1.0f : 0.0f;
  bool is_f64 = dtype == DType::F64;
  const void* alpha = is_f64 ? static_cast<const void*>(&alpha_f64) : &alpha_f32;
  const void* beta = is_f64 ? static_cast<const void*>(&beta_f64) : &beta_f32;
  cudnnStatus_t status = cudnnConvolutionForward(handle, alpha, plan.x, x, plan.w, weight, plan.conv, plan.algo,
                                                 workspace, plan.workspace_bytes, beta, plan.y, y);
  // Stream-ordered free: the memory is reused only by work queued after the convolution.
  if (workspace) free_bytes(where, workspace, plan.workspace_bytes, on);
  CUDNN_CHECK(status);
  return true;
}

#endif  // WICK_HAS_CUDNN

// The fallback: per batch item, im2col then one strided-batched GEMM over the groups.
template <typename T>
void conv2d_im2col(const Conv2dGeometry& g, DType dtype, const void* x, const void* weight, bool accumulate, void* y,
                   cudaStream_t stream) {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  Device where = Device::cuda(device);
  Stream on{where, stream};
  int64_t n_columns = g.ho * g.wo, og = g.outputs_per_group(), kg = g.patch_size();
  int64_t column_elements = g.c * g.kh * g.kw * n_columns;
  size_t bytes = static_cast<size_t>(column_elements) * sizeof(T);
  T* columns = static_cast<T*>(allocate_bytes(where, bytes, on));
  for (int64_t item = 0; item < g.n; ++item) {
    const T* x_item = static_cast<const T*>(x) + item * g.c * g.h * g.w;
    im2col_kernel<T><<<grid_for(column_elements), block_size, 0, stream>>>(x_item, columns, g, column_elements);
    CUDA_CHECK_LAUNCH();
    GemmProblem p;
    p.dtype = dtype;
    p.m = og;
    p.n = n_columns;
    p.k = kg;
    p.a = weight;
    p.lda = kg;
    p.b = columns;
    p.ldb = n_columns;
    p.c = static_cast<T*>(y) + item * g.o * n_columns;
    p.ldc = n_columns;
    p.accumulate = accumulate;
    p.n_batch = g.groups;
    p.a_batch.rank = p.b_batch.rank = p.c_batch.rank = 1;
    p.a_batch.shape[0] = p.b_batch.shape[0] = p.c_batch.shape[0] = g.groups;
    p.a_batch.strides[0] = og * kg;
    p.b_batch.strides[0] = kg * n_columns;
    p.c_batch.strides[0] = og * n_columns;
    gemm(p, stream);
  }
  free_bytes(where, columns, bytes, on);
}

}  // namespace

void conv2d(const Conv2dGeometry& g, DType dtype, const void* x, const void* weight, const void* bias, void* y,
            void* stream) {
  if (g.n * g.o * g.ho * g.wo == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, bf16> || std::is_same_v<T, f16>) {
      if (bias) fill_bias<T>(g, bias, y, s);
#if WICK_HAS_CUDNN
      if (conv2d_cudnn(g, dtype, x, weight, bias != nullptr, y, s)) return;
#endif
      conv2d_im2col<T>(g, dtype, x, weight, bias != nullptr, y, s);
    }
  });
}

}  // namespace wick::cuda
