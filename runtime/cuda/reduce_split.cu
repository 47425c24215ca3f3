// Reductions of few long rows across the whole GPU (declared in runtime/cuda/reduce.h). Each row
// is cut into `splits` chunks; pass 1 reduces every chunk in its own block into an accumulator-typed
// partial (16-byte vector loads where the row allows), pass 2 combines a row's partials in one block
// in a fixed order. No atomics: the result is the same on every run. Var and LogSumExp make two such
// sweeps, the first for the centre (the mean, the maximum).
#include <type_traits>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/reduce.h"
#include "runtime/kernel_args.h"
#include "runtime/ops/elementwise_math.h"

namespace wick::cuda {
namespace {

constexpr int split_threads = 256;
constexpr int split_warps = split_threads / 32;
constexpr int64_t min_chunk = 8192;     // elements per block at the least
constexpr int64_t target_blocks = 1024; // blocks of pass 1 over all rows
constexpr int64_t chunk_multiple = 16;  // chunks start 16-element aligned (vector loads of 1-byte types)

// What a chunk computes: plain sums, extremes, or sums of (x - centre)^2 / exp(x - centre).
enum class Pass { Sum, Max, Min, SquaredDeviation, ExpDeviation };
// What pass 2 writes from a row's combined value s (n: row length, c: the row's centre).
enum class Finish { Value, Mean, Var, LogSumExp };

template <Pass kPass, typename A>
__device__ A pass_identity() {
  if constexpr (kPass == Pass::Max) return lowest_value<A>();
  else if constexpr (kPass == Pass::Min) return highest_value<A>();
  else return A(0);
}

template <Pass kPass, typename A>
__device__ A pass_combine(A a, A b) {
  if constexpr (kPass == Pass::Max) return math::maximum(a, b);
  else if constexpr (kPass == Pass::Min) return math::minimum(a, b);
  else return a + b;
}

template <Pass kPass, typename A>
__device__ A pass_term(A x, A centre) {
  if constexpr (kPass == Pass::SquaredDeviation) return (x - centre) * (x - centre);
  else if constexpr (kPass == Pass::ExpDeviation) return math::exp(x - centre);
  else return x;
}

// The block's combination of `value` (blockDim.x == split_threads), in a fixed order; valid in thread 0.
template <Pass kPass, typename A>
__device__ A block_combine(A value) {
  __shared__ A warp_values[split_warps];
  for (int offset = 16; offset > 0; offset >>= 1)
    value = pass_combine<kPass>(value, __shfl_xor_sync(0xffffffffu, value, offset));
  if (threadIdx.x % 32 == 0) warp_values[threadIdx.x / 32] = value;
  __syncthreads();
  A total = warp_values[0];
  for (int w = 1; w < split_warps; ++w) total = pass_combine<kPass>(total, warp_values[w]);
  return total;
}

template <typename T>
struct alignas(16) Vector16 {
  static constexpr int size = sizeof(T) <= 16 ? 16 / static_cast<int>(sizeof(T)) : 1;
  T values[size];
};

// Pass 1: block (split, row) reduces row[split * chunk, min(n, (split + 1) * chunk)) into
// partials[row * gridDim.x + split]. `centre` (per row) is read by the deviation passes only.
template <Pass kPass, typename T>
__global__ void chunk_kernel(const T* x, int64_t n, int64_t chunk, const accumulate_t<T>* centre,
                             accumulate_t<T>* partials) {
  using A = accumulate_t<T>;
  int64_t r = blockIdx.y, split = blockIdx.x;
  const T* row = x + r * n;
  int64_t begin = split * chunk, end = begin + chunk < n ? begin + chunk : n;
  A c = centre != nullptr ? centre[r] : A(0);
  A acc = pass_identity<kPass, A>();
  using V = Vector16<T>;
  int64_t i = begin;
  if (V::size > 1 && reinterpret_cast<uintptr_t>(row + begin) % 16 == 0) {
    int64_t vector_end = begin + (end - begin) / V::size * V::size;
    for (int64_t at = begin + int64_t(threadIdx.x) * V::size; at < vector_end; at += int64_t(blockDim.x) * V::size) {
      V v = *reinterpret_cast<const V*>(row + at);
#pragma unroll
      for (int j = 0; j < V::size; ++j) acc = pass_combine<kPass>(acc, pass_term<kPass>(convert<A>(v.values[j]), c));
    }
    i = vector_end;
  }
  for (i += threadIdx.x; i < end; i += blockDim.x) acc = pass_combine<kPass>(acc, pass_term<kPass>(convert<A>(row[i]), c));
  acc = block_combine<kPass>(acc);
  if (threadIdx.x == 0) partials[r * gridDim.x + split] = acc;
}

// Pass 2: block r combines partials[r * splits ...] and writes out[r] as `kFinish` says.
template <Pass kPass, Finish kFinish, typename A, typename O>
__global__ void finish_kernel(const A* partials, int64_t splits, const A* centre, O* out, int64_t n,
                              double correction) {
  int64_t r = blockIdx.x;
  A acc = pass_identity<kPass, A>();
  for (int64_t j = threadIdx.x; j < splits; j += blockDim.x) acc = pass_combine<kPass>(acc, partials[r * splits + j]);
  A s = block_combine<kPass>(acc);
  if (threadIdx.x != 0) return;
  if constexpr (kFinish == Finish::Value) {
    out[r] = convert<O>(s);
  } else if constexpr (kFinish == Finish::Mean) {
    out[r] = convert<O>(s / static_cast<A>(n));
  } else if constexpr (kFinish == Finish::Var) {
    double divisor = static_cast<double>(n) - correction;
    out[r] = convert<O>(s / static_cast<A>(divisor > 0.0 ? divisor : 0.0));
  } else {  // LogSumExp: an infinite maximum is the answer itself
    A c = centre[r];
    out[r] = convert<O>(isinf(c) ? c : c + math::log(s));
  }
}

struct SplitPlan {
  int64_t splits = 1, chunk = 0;
};

SplitPlan split_plan(ReduceOp op, int64_t n_rows, int64_t n) {
  SplitPlan plan{1, n};
  if (op == ReduceOp::ArgMax || n_rows <= 0 || n_rows >= 256 || n < 4 * min_chunk) return plan;
  int64_t want = (target_blocks + n_rows - 1) / n_rows;
  int64_t most = n / min_chunk;
  int64_t splits = want < most ? want : most;
  if (splits < 2) return plan;
  int64_t chunk = (n + splits - 1) / splits;
  chunk = (chunk + chunk_multiple - 1) / chunk_multiple * chunk_multiple;
  return {(n + chunk - 1) / chunk, chunk};
}

template <Pass kPass, typename T>
void launch_chunks(const T* x, int64_t n_rows, int64_t n, const SplitPlan& plan, const accumulate_t<T>* centre,
                   accumulate_t<T>* partials, cudaStream_t s) {
  dim3 grid(static_cast<unsigned>(plan.splits), static_cast<unsigned>(n_rows));
  chunk_kernel<kPass, T><<<grid, split_threads, 0, s>>>(x, n, plan.chunk, centre, partials);
  CUDA_CHECK_LAUNCH();
}

template <Pass kPass, Finish kFinish, typename A, typename O>
void launch_finish(const A* partials, int64_t n_rows, const SplitPlan& plan, const A* centre, O* out, int64_t n,
                   double correction, cudaStream_t s) {
  finish_kernel<kPass, kFinish, A, O>
      <<<static_cast<unsigned>(n_rows), split_threads, 0, s>>>(partials, plan.splits, centre, out, n, correction);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

int64_t reduce_workspace_bytes(ReduceOp op, int64_t n_rows, int64_t row_length) {
  SplitPlan plan = split_plan(op, n_rows, row_length);
  if (plan.splits <= 1) return 0;
  // Partials plus one centre per row, in the widest accumulator (f64 / i64).
  return (n_rows * plan.splits + n_rows) * static_cast<int64_t>(sizeof(double));
}

bool reduce_rows_split(ReduceOp op, DType dtype, const void* x, void* out, int64_t n_rows, int64_t row_length,
                       double correction, void* workspace, void* stream) {
  SplitPlan plan = split_plan(op, n_rows, row_length);
  if (plan.splits <= 1 || workspace == nullptr) return false;
  auto s = static_cast<cudaStream_t>(stream);
  bool launched = false;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = accumulate_t<T>;
    const T* in = static_cast<const T*>(x);
    A* partials = static_cast<A*>(workspace);
    A* centre = partials + n_rows * plan.splits;
    auto finish = [&](auto pass_tag, auto finish_tag, auto op_tag) {
      constexpr Pass kPass = decltype(pass_tag)::value;
      constexpr Finish kFinish = decltype(finish_tag)::value;
      using O = reduce_output_t<decltype(op_tag)::value, T>;
      constexpr bool centred = kPass == Pass::SquaredDeviation || kPass == Pass::ExpDeviation;
      launch_chunks<kPass>(in, n_rows, row_length, plan, centred ? centre : nullptr, partials, s);
      launch_finish<kPass, kFinish>(partials, n_rows, plan, centre, static_cast<O*>(out), row_length, correction, s);
      launched = true;
    };
    using PassSum = std::integral_constant<Pass, Pass::Sum>;
    using Value = std::integral_constant<Finish, Finish::Value>;
    switch (op) {
      case ReduceOp::Sum: finish(PassSum{}, Value{}, std::integral_constant<ReduceOp, ReduceOp::Sum>{}); break;
      case ReduceOp::Max:
        finish(std::integral_constant<Pass, Pass::Max>{}, Value{}, std::integral_constant<ReduceOp, ReduceOp::Max>{});
        break;
      case ReduceOp::Min:
        finish(std::integral_constant<Pass, Pass::Min>{}, Value{}, std::integral_constant<ReduceOp, ReduceOp::Min>{});
        break;
      default:
        if constexpr (std::is_floating_point_v<A>) {
          using MeanOp = std::integral_constant<ReduceOp, ReduceOp::Mean>;
          if (op == ReduceOp::Mean) {
            finish(PassSum{}, std::integral_constant<Finish, Finish::Mean>{}, MeanOp{});
          } else if (op == ReduceOp::Var) {
            // The mean first (into `centre`), then the squared deviations from it.
            launch_chunks<Pass::Sum>(in, n_rows, row_length, plan, nullptr, partials, s);
            launch_finish<Pass::Sum, Finish::Mean, A, A>(partials, n_rows, plan, nullptr, centre, row_length, 0.0, s);
            finish(std::integral_constant<Pass, Pass::SquaredDeviation>{}, std::integral_constant<Finish, Finish::Var>{},
                   std::integral_constant<ReduceOp, ReduceOp::Var>{});
          } else if (op == ReduceOp::LogSumExp) {
            launch_chunks<Pass::Max>(in, n_rows, row_length, plan, nullptr, partials, s);
            launch_finish<Pass::Max, Finish::Value, A, A>(partials, n_rows, plan, nullptr, centre, row_length, 0.0, s);
            finish(std::integral_constant<Pass, Pass::ExpDeviation>{},
                   std::integral_constant<Finish, Finish::LogSumExp>{},
                   std::integral_constant<ReduceOp, ReduceOp::LogSumExp>{});
          }
        }
        break;
    }
  });
  return launched;
}

}  // namespace wick::cuda
