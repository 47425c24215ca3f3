// Reduction kinds and accumulator types shared by the CPU and CUDA row-reduction kernels.
// C++17-clean (included from .cu files).
//
//   using A = accumulate_t<bf16>;    // float: 16-bit and f32 inputs accumulate in f32
//   using O = reduce_output_t<ReduceOp::Sum, int32_t>;   // int64_t
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

#include "runtime/dtype.h"

namespace wick {

enum class ReduceOp : uint8_t { Sum, Mean, Max, Min, ArgMax, Var, LogSumExp };

// f32 for f32/bf16/f16, f64 for f64, i64 for integers.
template <typename T> struct accumulate_type { using type = int64_t; };
template <> struct accumulate_type<float> { using type = float; };
template <> struct accumulate_type<bf16> { using type = float; };
template <> struct accumulate_type<f16> { using type = float; };
template <> struct accumulate_type<double> { using type = double; };
template <typename T> using accumulate_t = typename accumulate_type<T>::type;

// The element type a reduction writes: i64 for argmax and for sums of integers, else the input's.
template <ReduceOp kOp, typename T>
using reduce_output_t =
    std::conditional_t<kOp == ReduceOp::ArgMax || (kOp == ReduceOp::Sum && std::is_integral_v<T>), int64_t, T>;

// Identity of max/min in the accumulator type.
template <typename A>
WICK_HD A lowest_value() {
  if constexpr (std::is_floating_point_v<A>)
    return -std::numeric_limits<A>::infinity();
  else
    return std::numeric_limits<A>::lowest();
}
template <typename A>
WICK_HD A highest_value() {
  if constexpr (std::is_floating_point_v<A>)
    return std::numeric_limits<A>::infinity();
  else
    return std::numeric_limits<A>::max();
}

}  // namespace wick
