#include <type_traits>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/elementwise.h"
#include "runtime/cuda/launch.cuh"
#include "runtime/kernel_args.h"
#include "runtime/ops/elementwise_math.h"

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

template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T values[N];
};

// Elements per 16-byte vector of T.
template <typename T>
constexpr int pack_size() {
  return sizeof(T) >= 16 ? 1 : 16 / static_cast<int>(sizeof(T));
}

// Dense operands (a tensor read in order, or a scalar) and output, 16-byte aligned: vectors of
// pack_size<T>() elements per load, the tail one by one.
template <BinaryOp kOp, typename T, typename O>
__global__ void binary_dense_kernel(const T* a, compute_t<T> a_scalar, const T* b, compute_t<T> b_scalar, O* out,
                                    int64_t n) {
  constexpr int N = pack_size<T>();
  int64_t n_packs = n / N;
  int64_t stride = int64_t(gridDim.x) * blockDim.x;
  int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  for (int64_t p = first; p < n_packs; p += stride) {
    Pack<T, N> va, vb;
    if (a != nullptr) va = reinterpret_cast<const Pack<T, N>*>(a)[p];
    if (b != nullptr) vb = reinterpret_cast<const Pack<T, N>*>(b)[p];
    Pack<O, N> result;
#pragma unroll
    for (int j = 0; j < N; ++j) {
      compute_t<T> x = a != nullptr ? convert<compute_t<T>>(va.values[j]) : a_scalar;
      compute_t<T> y = b != nullptr ? convert<compute_t<T>>(vb.values[j]) : b_scalar;
      result.values[j] = convert<O>(binary_value<kOp>(x, y));
    }
    reinterpret_cast<Pack<O, N>*>(out)[p] = result;
  }
  for (int64_t i = n_packs * N + first; i < n; i += stride) {
    compute_t<T> x = a != nullptr ? convert<compute_t<T>>(a[i]) : a_scalar;
    compute_t<T> y = b != nullptr ? convert<compute_t<T>>(b[i]) : b_scalar;
    out[i] = convert<O>(binary_value<kOp>(x, y));
  }
}

// Whether `operand` is a scalar or a dense tensor at a 16-byte aligned address.
bool dense_aligned(const ElementwiseOperand& operand) {
  return operand.data == nullptr ||
         (view_is_flat(operand.view) && reinterpret_cast<uintptr_t>(operand.data) % 16 == 0);
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
      if (dense_aligned(a) && dense_aligned(b) && reinterpret_cast<uintptr_t>(out) % 16 == 0) {
        OperandLoader<T> la = make_loader<T>(a), lb = make_loader<T>(b);
        constexpr int N = pack_size<T>();
        binary_dense_kernel<kOp, T, O><<<grid_for((n + N - 1) / N), block_size, 0, s>>>(
            static_cast<const T*>(a.data), la.scalar, static_cast<const T*>(b.data), lb.scalar, static_cast<O*>(out),
            n);
        CUDA_CHECK_LAUNCH();
        return;
      }
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

// ---- gradients ----

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
