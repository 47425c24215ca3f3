#include <type_traits>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/elementwise.h"
#include "runtime/cuda/launch.cuh"

namespace wick::cuda {
namespace {

// ---- kernels ----
// Grid-stride loops; the operand layout (contiguous, strided, scalar) is a uniform branch.

template <UnaryOp kOp, typename T>
__global__ void unary_kernel(const T* x, StridedView x_view, bool flat, T* out, int64_t n) {
  using C = compute_t<T>;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    T value = flat ? x[i] : x[x_view.offset_of(i)];
    out[i] = convert<T>(unary_value<kOp>(convert<C>(value)));
  }
}

template <BinaryOp kOp, typename T, typename O>
__global__ void binary_kernel(OperandLoader<T> load_a, OperandLoader<T> load_b, O* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = convert<O>(binary_value<kOp>(load_a(i), load_b(i)));
}

template <typename T>
__global__ void where_kernel(OperandLoader<uint8_t> load_cond, OperandLoader<T> load_a, OperandLoader<T> load_b,
                             T* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = convert<T>(load_cond(i) != 0 ? load_a(i) : load_b(i));
}

template <typename T>
__global__ void fill_kernel(T* out, T value, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = value;
}

template <typename T>
__global__ void arange_kernel(T* out, double start, double step, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = convert<T>(start + static_cast<double>(i) * step);
}

}  // namespace

// ---- launchers ----

void unary(UnaryOp op, DType dtype, const void* x, const StridedView& x_view, void* out, int64_t n, void* stream) {
  if (n == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    dispatch_unary_op(op, [&](auto op_tag) {
      constexpr UnaryOp kOp = decltype(op_tag)::value;
      if constexpr (std::is_integral_v<T> && !unary_accepts_integers(kOp)) {
        return;  // rejected by the front-end
      } else {
        unary_kernel<kOp, T><<<grid_for(n), block_size, 0, s>>>(static_cast<const T*>(x), x_view,
                                                                 view_is_flat(x_view), static_cast<T*>(out), n);
        CUDA_CHECK_LAUNCH();
      }
    });
  });
}

void binary(BinaryOp op, DType dtype, const ElementwiseOperand& a, const ElementwiseOperand& b, void* out,
            int64_t n, void* stream) {
  if (n == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    dispatch_binary_op(op, [&](auto op_tag) {
      constexpr BinaryOp kOp = decltype(op_tag)::value;
      using O = std::conditional_t<is_comparison(kOp), uint8_t, T>;
      binary_kernel<kOp, T, O><<<grid_for(n), block_size, 0, s>>>(make_loader<T>(a), make_loader<T>(b),
                                                                   static_cast<O*>(out), n);
      CUDA_CHECK_LAUNCH();
    });
  });
}

void where(const ElementwiseOperand& cond, DType dtype, const ElementwiseOperand& a, const ElementwiseOperand& b,
           void* out, int64_t n, void* stream) {
  if (n == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    where_kernel<T><<<grid_for(n), block_size, 0, s>>>(make_loader<uint8_t>(cond), make_loader<T>(a),
                                                        make_loader<T>(b), static_cast<T*>(out), n);
    CUDA_CHECK_LAUNCH();
  });
}

void fill(DType dtype, void* out, double value, int64_t n, void* stream) {
  if (n == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    fill_kernel<T><<<grid_for(n), block_size, 0, s>>>(static_cast<T*>(out), convert<T>(value), n);
    CUDA_CHECK_LAUNCH();
  });
}

void arange(DType dtype, void* out, double start, double step, int64_t n, void* stream) {
  if (n == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    arange_kernel<T><<<grid_for(n), block_size, 0, s>>>(static_cast<T*>(out), start, step, n);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace wick::cuda
