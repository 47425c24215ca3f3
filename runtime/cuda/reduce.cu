#include <type_traits>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/group_reduce.cuh"
#include "runtime/cuda/launch.cuh"
#include "runtime/cuda/reduce.h"
#include "runtime/kernel_args.h"
#include "runtime/ops/elementwise_math.h"

namespace wick::cuda {
namespace {

// ---- kernels ----
// A group of threads per row, as runtime/cuda/group_reduce.cuh lays them out.

template <ReduceOp kOp, typename T, int kGroup>
__global__ void reduce_kernel(const T* x, reduce_output_t<kOp, T>* out, int64_t n_rows, int64_t n, double correction) {
  using A = accumulate_t<T>;
  int64_t r = group_row<kGroup>();
  if (r >= n_rows) return;  // whole warps only (kGroup == 32); kGroup == 256 never leaves
  const T* row = x + r * n;
  int lane = threadIdx.x % kGroup;
  A result;
  if constexpr (kOp == ReduceOp::Max || kOp == ReduceOp::LogSumExp) {
    A best = lowest_value<A>();
    for (int64_t i = lane; i < n; i += kGroup) best = math::maximum(best, convert<A>(row[i]));
    result = group_reduce<kGroup>(best, MaxOp{});
    if constexpr (kOp == ReduceOp::LogSumExp) {
      if (!isinf(result)) {
        A m = result, s = A(0);
        for (int64_t i = lane; i < n; i += kGroup) s += math::exp(convert<A>(row[i]) - m);
        result = m + math::log(group_reduce<kGroup>(s, SumOp{}));
      }
    }
  } else if constexpr (kOp == ReduceOp::Min) {
    A best = highest_value<A>();
    for (int64_t i = lane; i < n; i += kGroup) best = math::minimum(best, convert<A>(row[i]));
    result = group_reduce<kGroup>(best, MinOp{});
  } else {  // Sum, Mean, Var
    A s = A(0);
    for (int64_t i = lane; i < n; i += kGroup) s += convert<A>(row[i]);
    result = group_reduce<kGroup>(s, SumOp{});
    if constexpr (kOp == ReduceOp::Mean || kOp == ReduceOp::Var) result = result / static_cast<A>(n);
    if constexpr (kOp == ReduceOp::Var) {
      A mean = result, squares = A(0);
      for (int64_t i = lane; i < n; i += kGroup) {
        A d = convert<A>(row[i]) - mean;
        squares += d * d;
      }
      double divisor = static_cast<double>(n) - correction;
      result = group_reduce<kGroup>(squares, SumOp{}) / static_cast<A>(divisor > 0.0 ? divisor : 0.0);
    }
  }
  if (lane == 0) out[r] = convert<reduce_output_t<kOp, T>>(result);
}

// (value, index) is better than (best, best_index): larger, or equal with a smaller index; NaN
// beats numbers, the first NaN beats later ones.
template <typename A>
__device__ bool argmax_better(A value, int64_t index, A best, int64_t best_index) {
  bool value_nan = math::is_nan(value), best_nan = math::is_nan(best);
  if (value_nan || best_nan) return value_nan && (!best_nan || index < best_index);
  return value > best || (value == best && index < best_index);
}

template <typename T, int kGroup>
__global__ void argmax_kernel(const T* x, int64_t* out, int64_t n_rows, int64_t n) {
  using A = accumulate_t<T>;
  int64_t r = group_row<kGroup>();
  if (r >= n_rows) return;
  const T* row = x + r * n;
  int lane = threadIdx.x % kGroup;
  A best = lowest_value<A>();
  int64_t best_index = INT64_MAX;  // loses every tie against a real element
  for (int64_t i = lane; i < n; i += kGroup) {
    A v = convert<A>(row[i]);
    if (argmax_better(v, i, best, best_index)) {
      best = v;
      best_index = i;
    }
  }
  for (int offset = 16; offset > 0; offset >>= 1) {
    A other = __shfl_xor_sync(0xffffffffu, best, offset);
    long long other_index = __shfl_xor_sync(0xffffffffu, static_cast<long long>(best_index), offset);
    if (argmax_better(other, other_index, best, best_index)) {
      best = other;
      best_index = other_index;
    }
  }
  if constexpr (kGroup != 32) {
    __shared__ A values[warps_per_block];
    __shared__ int64_t indices[warps_per_block];
    if (threadIdx.x % 32 == 0) {
      values[threadIdx.x / 32] = best;
      indices[threadIdx.x / 32] = best_index;
    }
    __syncthreads();
    best = values[0];
    best_index = indices[0];
    for (int w = 1; w < warps_per_block; ++w)
      if (argmax_better(values[w], indices[w], best, best_index)) {
        best = values[w];
        best_index = indices[w];
      }
  }
  if (lane == 0) out[r] = best_index;
}

}  // namespace

// ---- launchers ----

void reduce_rows(ReduceOp op, DType dtype, const void* x, void* out, int64_t n_rows, int64_t row_length,
                 double correction, void* workspace, void* stream) {
  if (n_rows == 0 || row_length == 0) return;
  if (reduce_rows_split(op, dtype, x, out, n_rows, row_length, correction, workspace, stream)) return;
  auto s = static_cast<cudaStream_t>(stream);
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* in = static_cast<const T*>(x);
    auto run = [&](auto op_tag) {
      constexpr ReduceOp kOp = decltype(op_tag)::value;
      using O = reduce_output_t<kOp, T>;
      launch_rows(n_rows, row_length, [&](auto group_tag, unsigned blocks) {
        constexpr int kGroup = decltype(group_tag)::value;
        if constexpr (kOp == ReduceOp::ArgMax)
          argmax_kernel<T, kGroup><<<blocks, threads_per_block, 0, s>>>(in, static_cast<int64_t*>(out), n_rows,
                                                                        row_length);
        else
          reduce_kernel<kOp, T, kGroup><<<blocks, threads_per_block, 0, s>>>(in, static_cast<O*>(out), n_rows,
                                                                             row_length, correction);
        CUDA_CHECK_LAUNCH();
      });
    };
    switch (op) {
      case ReduceOp::Sum: run(std::integral_constant<ReduceOp, ReduceOp::Sum>{}); break;
      case ReduceOp::Max: run(std::integral_constant<ReduceOp, ReduceOp::Max>{}); break;
      case ReduceOp::Min: run(std::integral_constant<ReduceOp, ReduceOp::Min>{}); break;
      case ReduceOp::ArgMax: run(std::integral_constant<ReduceOp, ReduceOp::ArgMax>{}); break;
      default:
        // Mean, Var and LogSumExp are float-only (the front-end rejects integers).
        if constexpr (std::is_floating_point_v<accumulate_t<T>>) {
          if (op == ReduceOp::Mean) run(std::integral_constant<ReduceOp, ReduceOp::Mean>{});
          if (op == ReduceOp::Var) run(std::integral_constant<ReduceOp, ReduceOp::Var>{});
          if (op == ReduceOp::LogSumExp) run(std::integral_constant<ReduceOp, ReduceOp::LogSumExp>{});
        }
        break;
    }
  });
}

}  // namespace wick::cuda
