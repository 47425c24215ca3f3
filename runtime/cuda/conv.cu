#include <cuda_runtime.h>
#if WICK_HAS_CUDNN
#include <cudnn.h>
#endif

#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>

#include "runtime/cuda/conv.h"
#if WICK_HAS_CUDNN
#include "runtime/cuda/conv_cudnn.h"
#endif
#include "runtime/cuda/cuda_check.h"
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

// ---- gradients ----

// ---- kernels ----

// The adjoint of im2col as a gather (no atomics, deterministic): each x element of one item sums
// the columns entries of the taps that read it. Sums in compute_t<T>.
template <typename T>
__global__ void col2im_kernel(const T* columns, T* x, Conv2dGeometry g, int64_t n) {
  int64_t n_columns = g.ho * g.wo;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t channel = i / (g.h * g.w), ih = (i / g.w) % g.h, iw = i % g.w;
    compute_t<T> sum = compute_t<T>(0);
    for (int64_t ki = 0; ki < g.kh; ++ki) {
      int64_t th = ih + g.ph - ki * g.dh;  // = oh * sh for a tap that reads (ih, iw)
      if (th < 0 || th % g.sh != 0 || th / g.sh >= g.ho) continue;
      int64_t oh = th / g.sh;
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        int64_t tw = iw + g.pw - kj * g.dw;
        if (tw < 0 || tw % g.sw != 0 || tw / g.sw >= g.wo) continue;
        int64_t ow = tw / g.sw;
        sum += static_cast<compute_t<T>>(columns[((channel * g.kh + ki) * g.kw + kj) * n_columns + oh * g.wo + ow]);
      }
    }
    x[i] = convert<T>(sum);
  }
}

// ---- launchers ----
namespace {

bool is_pointwise(const Conv2dGeometry& g) {
  return g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0;
}

#if WICK_HAS_CUDNN

enum class Direction { Data, Filter };

struct BackwardPlan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnConvolutionBwdDataAlgo_t data_algo = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  cudnnConvolutionBwdFilterAlgo_t filter_algo = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
  size_t workspace_bytes = 0;
  bool supported = false;  // false: no suitable deterministic algorithm, use the GEMM fallback
};

constexpr size_t max_workspace = size_t{1} << 30;

// Accepts a heuristic result: it ran, fits the workspace cap, is deterministic, and is FMA (exact
// f32) for f32 problems.
template <typename Perf>
bool acceptable(const Perf& result, DType dtype) {
  if (result.status != CUDNN_STATUS_SUCCESS || result.memory > max_workspace) return false;
  if (result.determinism != CUDNN_DETERMINISTIC) return false;
  return dtype != DType::F32 || result.mathType == CUDNN_FMA_MATH;
}

BackwardPlan make_plan(cudnnHandle_t handle, const Conv2dGeometry& g, DType dtype, Direction direction) {
  BackwardPlan plan;
  ConvDescriptors d = make_conv_descriptors(g, dtype, "conv2d backward");
  plan.x = d.x, plan.y = d.y, plan.w = d.w, plan.conv = d.conv;

  if (direction == Direction::Data) {
    cudnnConvolutionBwdDataAlgoPerf_t results[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int n_results = 0;
    CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, plan.w, plan.y, plan.conv, plan.x,
                                                            CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n_results,
                                                            results));
    for (int i = 0; i < n_results && !plan.supported; ++i) {
      if (!acceptable(results[i], dtype)) continue;
      plan.data_algo = results[i].algo;
      plan.workspace_bytes = results[i].memory;
      CUDNN_CHECK(cudnnSetConvolutionMathType(plan.conv, results[i].mathType));
      plan.supported = true;
    }
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t results[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int n_results = 0;
    CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, plan.x, plan.y, plan.conv, plan.w,
                                                              CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n_results,
                                                              results));
    for (int i = 0; i < n_results && !plan.supported; ++i) {
      if (!acceptable(results[i], dtype)) continue;
      plan.filter_algo = results[i].algo;
      plan.workspace_bytes = results[i].memory;
      CUDNN_CHECK(cudnnSetConvolutionMathType(plan.conv, results[i].mathType));
      plan.supported = true;
    }
  }
  return plan;
}

using BackwardPlanKey = std::tuple<int, int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                                   int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;

const BackwardPlan& plan_for(int device, cudnnHandle_t handle, const Conv2dGeometry& g, DType dtype,
                             Direction direction) {
  static std::mutex mutex;
  static std::map<BackwardPlanKey, BackwardPlan> plans;  // descriptors live for the process
  BackwardPlanKey key{device, static_cast<int>(dtype), static_cast<int>(direction), g.n, g.c, g.h, g.w, g.o, g.kh,
                      g.kw, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, g.groups};
  std::lock_guard<std::mutex> lock(mutex);
  auto found = plans.find(key);
  if (found != plans.end()) return found->second;
  return plans.emplace(key, make_plan(handle, g, dtype, direction)).first->second;
}

// False when cuDNN has no suitable algorithm (nothing was queued). `a` is the weight (Data) or
// x (Filter); the result overwrites `out` (grad_x or grad_weight).
bool backward_cudnn(Direction direction, const Conv2dGeometry& g, DType dtype, const void* grad_y, const void* a,
                    void* out, cudaStream_t stream) {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  cudnnHandle_t handle = cudnn_handle(device);
  CUDNN_CHECK(cudnnSetStream(handle, stream));
  const BackwardPlan& plan = plan_for(device, handle, g, dtype, direction);
  if (!plan.supported) return false;
  Device where = Device::cuda(device);
  Stream on{where, stream};
  void* workspace = plan.workspace_bytes > 0 ? allocate_bytes(where, plan.workspace_bytes, on) : nullptr;
  double alpha_f64 = 1.0, beta_f64 = 0.0;
  float alpha_f32 = 1.0f, beta_f32 = 0.0f;
  bool is_f64 = dtype == DType::F64;
  const void* alpha = is_f64 ? static_cast<const void*>(&alpha_f64) : &alpha_f32;
  const void* beta = is_f64 ? static_cast<const void*>(&beta_f64) : &beta_f32;
  cudnnStatus_t status =
      direction == Direction::Data
          ? cudnnConvolutionBackwardData(handle, alpha, plan.w, a, plan.y, grad_y, plan.conv, plan.data_algo,
                                         workspace, plan.workspace_bytes, beta, plan.x, out)
          : cudnnConvolutionBackwardFilter(handle, alpha, plan.x, a, plan.y, grad_y, plan.conv, plan.filter_algo,
                                           workspace, plan.workspace_bytes, beta, plan.w, out);
  // Stream-ordered free: the memory is reused only by work queued after the convolution.
  if (workspace) free_bytes(where, workspace, plan.workspace_bytes, on);
  CUDNN_CHECK(status);
  return true;
}

#endif  // WICK_HAS_CUDNN

// The fallback for grad_x: per batch item, columns = weight_g^T @ grad_y_g (one strided-batched
// GEMM over the groups), then the col2im gather.
template <typename T>
void backward_input_gemm(const Conv2dGeometry& g, DType dtype, const void* grad_y, const void* weight, void* grad_x,
                         cudaStream_t stream) {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  Device where = Device::cuda(device);
  Stream on{where, stream};
  int64_t n_columns = g.ho * g.wo, og = g.outputs_per_group(), kg = g.patch_size();
  bool pointwise = is_pointwise(g);
  int64_t column_elements = g.c * g.kh * g.kw * n_columns, plane_elements = g.c * g.h * g.w;
  size_t bytes = pointwise ? 0 : static_cast<size_t>(column_elements) * sizeof(T);
  T* columns = pointwise ? nullptr : static_cast<T*>(allocate_bytes(where, bytes, on));
  for (int64_t item = 0; item < g.n; ++item) {
    T* grad_x_item = static_cast<T*>(grad_x) + item * plane_elements;
    GemmProblem p;
    p.dtype = dtype;
    p.m = kg;
    p.n = n_columns;
    p.k = og;
    p.a = weight;
    p.a_transposed = true;  // weight_g [og, kg] row-major is its transpose column-major
    p.lda = kg;
    p.b = static_cast<const T*>(grad_y) + item * g.o * n_columns;
    p.ldb = n_columns;
    p.c = pointwise ? grad_x_item : columns;
    p.ldc = n_columns;
    p.n_batch = g.groups;
    p.a_batch.rank = p.b_batch.rank = p.c_batch.rank = 1;
    p.a_batch.shape[0] = p.b_batch.shape[0] = p.c_batch.shape[0] = g.groups;
    p.a_batch.strides[0] = og * kg;
    p.b_batch.strides[0] = og * n_columns;
    p.c_batch.strides[0] = kg * n_columns;
    gemm(p, stream);
    if (!pointwise) {
      col2im_kernel<T><<<grid_for(plane_elements), block_size, 0, stream>>>(columns, grad_x_item, g, plane_elements);
      CUDA_CHECK_LAUNCH();
    }
  }
  if (columns) free_bytes(where, columns, bytes, on);
}

// The fallback for grad_weight: per batch item, im2col then grad_weight_g += grad_y_g @ columns_g^T.
template <typename T>
void backward_weight_gemm(const Conv2dGeometry& g, DType dtype, const void* grad_y, const void* x,
                          void* grad_weight, cudaStream_t stream) {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  Device where = Device::cuda(device);
  Stream on{where, stream};
  int64_t n_columns = g.ho * g.wo, og = g.outputs_per_group(), kg = g.patch_size();
  bool pointwise = is_pointwise(g);
  int64_t column_elements = g.c * g.kh * g.kw * n_columns;
  size_t bytes = pointwise ? 0 : static_cast<size_t>(column_elements) * sizeof(T);
  T* columns = pointwise ? nullptr : static_cast<T*>(allocate_bytes(where, bytes, on));
  if (g.n == 0) CUDA_CHECK(cudaMemsetAsync(grad_weight, 0, static_cast<size_t>(g.o * kg) * sizeof(T), stream));
  for (int64_t item = 0; item < g.n; ++item) {
    const T* x_item = static_cast<const T*>(x) + item * g.c * g.h * g.w;
    if (!pointwise) {
      im2col_kernel<T><<<grid_for(column_elements), block_size, 0, stream>>>(x_item, columns, g,
                                                                                       column_elements);
      CUDA_CHECK_LAUNCH();
    }
    GemmProblem p;
    p.dtype = dtype;
    p.m = og;
    p.n = kg;
    p.k = n_columns;
    p.a = static_cast<const T*>(grad_y) + item * g.o * n_columns;
    p.lda = n_columns;
    p.b = pointwise ? x_item : columns;
    p.b_transposed = true;  // columns_g [kg, ho*wo] row-major
    p.ldb = n_columns;
    p.c = grad_weight;
    p.ldc = kg;
    p.accumulate = item > 0;
    p.n_batch = g.groups;
    p.a_batch.rank = p.b_batch.rank = p.c_batch.rank = 1;
    p.a_batch.shape[0] = p.b_batch.shape[0] = p.c_batch.shape[0] = g.groups;
    p.a_batch.strides[0] = og * n_columns;
    p.b_batch.strides[0] = kg * n_columns;
    p.c_batch.strides[0] = og * kg;
    gemm(p, stream);
  }
  if (columns) free_bytes(where, columns, bytes, on);
}

template <typename T>
constexpr bool is_conv_type = std::is_floating_point_v<T> || std::is_same_v<T, bf16> || std::is_same_v<T, f16>;

}  // namespace

void conv2d_backward_input(const Conv2dGeometry& g, DType dtype, const void* grad_y, const void* weight,
                           void* grad_x, void* stream) {
  if (g.n * g.c * g.h * g.w == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (is_conv_type<T>) {
#if WICK_HAS_CUDNN
      if (backward_cudnn(Direction::Data, g, dtype, grad_y, weight, grad_x, s)) return;
#endif
      backward_input_gemm<T>(g, dtype, grad_y, weight, grad_x, s);
    }
  });
}

void conv2d_backward_weight(const Conv2dGeometry& g, DType dtype, const void* grad_y, const void* x,
                            void* grad_weight, void* stream) {
  if (g.o * g.patch_size() == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (is_conv_type<T>) {
#if WICK_HAS_CUDNN
      if (g.n > 0 && backward_cudnn(Direction::Filter, g, dtype, grad_y, x, grad_weight, s)) return;
#endif
      backward_weight_gemm<T>(g, dtype, grad_y, x, grad_weight, s);
    }
  });
}

}  // namespace wick::cuda
