#include "runtime/cpu/reduce.h"

#include <algorithm>
#include <cmath>

#include "runtime/cpu/pairwise_sum.h"
#include "runtime/cpu/parallel.h"
#include "runtime/kernel_args.h"
#include "runtime/ops/elementwise_math.h"

namespace wick::cpu {
namespace {

template <ReduceOp kOp, typename T>
void reduce_typed(const T* x, void* out_ptr, int64_t n_rows, int64_t n, double correction) {
  using A = accumulate_t<T>;
  using O = reduce_output_t<kOp, T>;
  O* out = static_cast<O*>(out_ptr);
  int64_t grain = std::max<int64_t>(1, default_grain / n);
  parallel_for(
      n_rows,
      [&](int64_t row_begin, int64_t row_end) {
        for (int64_t r = row_begin; r < row_end; ++r) {
          const T* row = x + r * n;
          auto load = [row](int64_t i) { return convert<A>(row[i]); };
          if constexpr (kOp == ReduceOp::Sum) {
            out[r] = convert<O>(pairwise_sum<A>(0, n, load));
          } else if constexpr (kOp == ReduceOp::Max) {
            out[r] = convert<O>(row_max<T, A>(row, n));
          } else if constexpr (kOp == ReduceOp::Min) {
            A best = highest_value<A>();
            for (int64_t i = 0; i < n; ++i) best = math::minimum(best, load(i));
            out[r] = convert<O>(best);
          } else if constexpr (kOp == ReduceOp::ArgMax) {
            // First index of the maximum; the first NaN if there is one.
            A best = load(0);
            int64_t best_index = 0;
            for (int64_t i = 1; i < n && !math::is_nan(best); ++i) {
              A v = load(i);
              if (v > best || math::is_nan(v)) {
                best = v;
                best_index = i;
              }
            }
            out[r] = best_index;
          } else if constexpr (std::is_floating_point_v<A>) {
            if constexpr (kOp == ReduceOp::Mean) {
              out[r] = convert<O>(pairwise_sum<A>(0, n, load) / static_cast<A>(n));
            } else if constexpr (kOp == ReduceOp::Var) {
              A mean = pairwise_sum<A>(0, n, load) / static_cast<A>(n);
              A squares = pairwise_sum<A>(0, n, [&](int64_t i) {
                A d = load(i) - mean;
                return d * d;
              });
              A divisor = static_cast<A>(std::max(static_cast<double>(n) - correction, 0.0));
              out[r] = convert<O>(squares / divisor);
            } else {  // LogSumExp
              A m = row_max<T, A>(row, n);
              if (std::isinf(m)) {
                out[r] = convert<O>(m);  // all -inf, or some +inf
              } else {
                A s = pairwise_sum<A>(0, n, [&](int64_t i) { return math::exp(load(i) - m); });
                out[r] = convert<O>(m + math::log(s));
              }
            }
          }
        }
      },
      grain);
}

template <typename T>
void sum_middle_typed(const T* x, T* out, int64_t outer, int64_t mid, int64_t inner, bool mean) {
  using A = accumulate_t<T>;
  constexpr int64_t block_rows = 256, block_columns = 256;
  const int64_t column_blocks = (inner + block_columns - 1) / block_columns;
  const int64_t work_per_task = mid * std::min(inner, block_columns);
  parallel_for(
      outer * column_blocks,
      [&](int64_t task_begin, int64_t task_end) {
        A total[block_columns], partial[block_columns];
        for (int64_t task = task_begin; task < task_end; ++task) {
          const int64_t o = task / column_blocks, i0 = (task % column_blocks) * block_columns;
          const int64_t width = std::min(block_columns, inner - i0);
          const T* base = x + o * mid * inner + i0;
          std::fill(total, total + width, A(0));
          for (int64_t m0 = 0; m0 < mid; m0 += block_rows) {
            std::fill(partial, partial + width, A(0));
            const int64_t m_end = std::min(mid, m0 + block_rows);
            for (int64_t m = m0; m < m_end; ++m) {
              const T* row = base + m * inner;
              for (int64_t i = 0; i < width; ++i) partial[i] += convert<A>(row[i]);
            }
            for (int64_t i = 0; i < width; ++i) total[i] += partial[i];
          }
          T* o_row = out + o * inner + i0;
          const A scale = mean ? A(1) / static_cast<A>(mid) : A(1);
          for (int64_t i = 0; i < width; ++i) o_row[i] = convert<T>(mean ? total[i] * scale : total[i]);
        }
      },
      std::max<int64_t>(1, default_grain / std::max<int64_t>(work_per_task, 1)));
}

}  // namespace

void sum_middle(DType dtype, const void* x, void* out, int64_t outer, int64_t mid, int64_t inner, bool mean) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<accumulate_t<T>>)
      sum_middle_typed<T>(static_cast<const T*>(x), static_cast<T*>(out), outer, mid, inner, mean);
  });
}

void reduce_rows(ReduceOp op, DType dtype, const void* x, void* out, int64_t n_rows, int64_t row_length,
                 double correction) {
  if (n_rows == 0 || row_length == 0) return;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* in = static_cast<const T*>(x);
    switch (op) {
      case ReduceOp::Sum: reduce_typed<ReduceOp::Sum, T>(in, out, n_rows, row_length, correction); break;
      case ReduceOp::Mean: reduce_typed<ReduceOp::Mean, T>(in, out, n_rows, row_length, correction); break;
      case ReduceOp::Max: reduce_typed<ReduceOp::Max, T>(in, out, n_rows, row_length, correction); break;
      case ReduceOp::Min: reduce_typed<ReduceOp::Min, T>(in, out, n_rows, row_length, correction); break;
      case ReduceOp::ArgMax: reduce_typed<ReduceOp::ArgMax, T>(in, out, n_rows, row_length, correction); break;
      case ReduceOp::Var: reduce_typed<ReduceOp::Var, T>(in, out, n_rows, row_length, correction); break;
      case ReduceOp::LogSumExp:
        reduce_typed<ReduceOp::LogSumExp, T>(in, out, n_rows, row_length, correction);
        break;
    }
  });
}

}  // namespace wick::cpu
