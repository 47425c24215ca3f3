#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/kernels.h"
#include "runtime/cuda/launch.cuh"

namespace wick::cuda {

// ---- kernels ----
template <typename D, typename S>
__global__ void copy_strided_kernel(D* dst, StridedView dst_view, const S* src, StridedView src_view, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[dst_view.offset_of(i)] = convert<D>(src[src_view.offset_of(i)]);
}

template <typename D, typename S>
__global__ void copy_flat_kernel(D* dst, const S* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = convert<D>(src[i]);
}

// ---- launchers ----
void copy_strided(void* dst, DType dst_dtype, const StridedView& dst_view, const void* src, DType src_dtype,
                  const StridedView& src_view, int64_t n, void* stream) {
  if (n == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  bool dst_flat = dst_view.rank <= 1 && (dst_view.rank == 0 || dst_view.strides[0] == 1);
  bool src_flat = src_view.rank <= 1 && (src_view.rank == 0 || src_view.strides[0] == 1);
  if (dst_flat && src_flat && dst_dtype == src_dtype) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, n * dtype_size(dst_dtype), cudaMemcpyDeviceToDevice, s));
    return;
  }
  dispatch_dtype(dst_dtype, [&](auto dst_tag) {
    using D = decltype(dst_tag);
    dispatch_dtype(src_dtype, [&](auto src_tag) {
      using S = decltype(src_tag);
      if (dst_flat && src_flat)
        copy_flat_kernel<D, S><<<grid_for(n), block_size, 0, s>>>(static_cast<D*>(dst), static_cast<const S*>(src), n);
      else
        copy_strided_kernel<D, S><<<grid_for(n), block_size, 0, s>>>(static_cast<D*>(dst), dst_view,
                                                                     static_cast<const S*>(src), src_view, n);
      CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace wick::cuda
