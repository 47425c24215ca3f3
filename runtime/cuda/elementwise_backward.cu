#include <type_traits>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/elementwise_backward.h"
#include "runtime/cuda/launch.cuh"
#include "runtime/kernel_args.h"
#include "runtime/ops/elementwise_backward_math.h"

namespace wick::cuda {
namespace {

// ---- kernels ----

template <UnaryOp kOp, typename T>
__global__ void unary_backward_kernel(const T* grad, const T* x, T* out, int64_t n) {
  using C = compute_t<T>;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = convert<T>(convert<C>(grad[i]) * unary_derivative<kOp>(convert<C>(x[i])));
}

}  // namespace

// ---- launchers ----

void unary_backward(UnaryOp op, DType dtype, const void* grad, const void* x, void* out, int64_t n, void* stream) {
  if (n == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<compute_t<T>>) {
      dispatch_unary_backward_op(op, [&](auto op_tag) {
        constexpr UnaryOp kOp = decltype(op_tag)::value;
        unary_backward_kernel<kOp, T><<<grid_for(n), block_size, 0, s>>>(
            static_cast<const T*>(grad), static_cast<const T*>(x), static_cast<T*>(out), n);
        CUDA_CHECK_LAUNCH();
      });
    }
  });
}

}  // namespace wick::cuda
