#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/launch.cuh"
#include "runtime/cuda/rope.h"

namespace wick::cuda {
namespace {

// ---- kernels ----
template <typename T, typename C>
__global__ void apply_rope_kernel(T* out, const T* x, StridedView x_view, int64_t x_pair_stride, const C* cos,
                                  const C* sin, StridedView table_view, int64_t n_pairs) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < n_pairs; p += int64_t(gridDim.x) * blockDim.x) {
    int64_t at = x_view.offset_of(2 * p), table_at = table_view.offset_of(p);
    C x0 = static_cast<C>(x[at]), x1 = static_cast<C>(x[at + x_pair_stride]);
    C c = cos[table_at], s = sin[table_at];
    out[2 * p] = convert<T>(c * x0 - s * x1);
    out[2 * p + 1] = convert<T>(s * x0 + c * x1);
  }
}

}  // namespace

// ---- launchers ----
void apply_rope(void* out, const void* x, DType dtype, const StridedView& x_view, int64_t x_pair_stride,
                const void* cos, const void* sin, const StridedView& table_view, int64_t n_pairs, void* stream) {
  if (n_pairs == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<compute_t<T>>) {
      using C = compute_t<T>;
      apply_rope_kernel<T, C><<<grid_for(n_pairs), block_size, 0, s>>>(
          static_cast<T*>(out), static_cast<const T*>(x), x_view, x_pair_stride, static_cast<const C*>(cos),
          static_cast<const C*>(sin), table_view, n_pairs);
      CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace wick::cuda
