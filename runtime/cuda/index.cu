#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/index.h"
#include "runtime/cuda/launch.cuh"

namespace wick::cuda {
namespace {

template <typename Fn>
void dispatch_word(int element_size, Fn&& fn) {
  switch (element_size) {
    case 1: fn(uint8_t{}); break;
    case 2: fn(uint16_t{}); break;
    case 4: fn(uint32_t{}); break;
    default: fn(uint64_t{}); break;
  }
}

__device__ __forceinline__ int64_t clamp_index(int64_t i, int64_t extent) {
  return i < 0 ? 0 : (i >= extent ? extent - 1 : i);
}

// ---- kernels ----
template <typename W>
__global__ void index_select_kernel(W* out, const W* x, const int64_t* index, int64_t n_index, int64_t extent,
                                    int64_t inner, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t c = i % inner;
    int64_t row = i / inner;
    int64_t r = row % n_index, o = row / n_index;
    out[i] = x[(o * extent + clamp_index(index[r], extent)) * inner + c];
  }
}

template <typename W>
__global__ void gather_kernel(W* out, const W* x, StridedView x_view, int64_t axis_stride, int64_t extent,
                              const int64_t* index, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = x[x_view.offset_of(i) + clamp_index(index[i], extent) * axis_stride];
}

__device__ __forceinline__ void atomic_add(float* at, float v) { atomicAdd(at, v); }
__device__ __forceinline__ void atomic_add(double* at, double v) { atomicAdd(at, v); }
__device__ __forceinline__ void atomic_add(int32_t* at, int32_t v) { atomicAdd(reinterpret_cast<int*>(at), int(v)); }
__device__ __forceinline__ void atomic_add(int64_t* at, int64_t v) {
  // Two's complement: unsigned addition wraps to the same bits as signed addition.
  atomicAdd(reinterpret_cast<unsigned long long*>(at), static_cast<unsigned long long>(v));
}

template <typename T>
__global__ void scatter_add_kernel(T* out, StridedView out_view, int64_t axis_stride, int64_t extent,
                                   const int64_t* index, const T* src, StridedView src_view, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    atomic_add(out + out_view.offset_of(i) + clamp_index(index[i], extent) * axis_stride, src[src_view.offset_of(i)]);
}

template <typename T>
__global__ void index_add_kernel(T* out, const T* src, const int64_t* index, int64_t n_index, int64_t extent,
                                 int64_t inner, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t c = i % inner;
    int64_t row = i / inner;
    int64_t r = row % n_index, o = row / n_index;
    atomic_add(out + (o * extent + clamp_index(index[r], extent)) * inner + c, src[i]);
  }
}

}  // namespace

// ---- launchers ----
void index_select(void* out, const void* x, int element_size, const int64_t* index, int64_t n_index, int64_t outer,
                  int64_t extent, int64_t inner, void* stream) {
  int64_t n = outer * n_index * inner;
  if (n == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  dispatch_word(element_size, [&](auto tag) {
    using W = decltype(tag);
    index_select_kernel<W><<<grid_for(n), block_size, 0, s>>>(static_cast<W*>(out), static_cast<const W*>(x), index,
                                                              n_index, extent, inner, n);
    CUDA_CHECK_LAUNCH();
  });
}

void gather(void* out, const void* x, int element_size, const StridedView& x_view, int64_t axis_stride,
            int64_t extent, const int64_t* index, int64_t n, void* stream) {
  if (n == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  dispatch_word(element_size, [&](auto tag) {
    using W = decltype(tag);
    gather_kernel<W><<<grid_for(n), block_size, 0, s>>>(static_cast<W*>(out), static_cast<const W*>(x), x_view,
                                                        axis_stride, extent, index, n);
    CUDA_CHECK_LAUNCH();
  });
}

void scatter_add(void* out, DType dtype, const StridedView& out_view, int64_t axis_stride, int64_t extent,
                 const int64_t* index, const void* src, const StridedView& src_view, int64_t n, void* stream) {
  if (n == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, int32_t> ||
                  std::is_same_v<T, int64_t>) {
      scatter_add_kernel<T><<<grid_for(n), block_size, 0, s>>>(static_cast<T*>(out), out_view, axis_stride, extent,
                                                               index, static_cast<const T*>(src), src_view, n);
      CUDA_CHECK_LAUNCH();
    }
  });
}

void index_add(void* out, DType dtype, const void* src, const int64_t* index, int64_t n_index, int64_t outer,
               int64_t extent, int64_t inner, void* stream) {
  int64_t n = outer * n_index * inner;
  if (n == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, int32_t> ||
                  std::is_same_v<T, int64_t>) {
      index_add_kernel<T><<<grid_for(n), block_size, 0, s>>>(static_cast<T*>(out), static_cast<const T*>(src), index,
                                                             n_index, extent, inner, n);
      CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace wick::cuda
