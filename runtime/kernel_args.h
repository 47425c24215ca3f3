// What a kernel needs to walk a strided tensor, in a form that can be passed by value to a CUDA
// kernel, plus the element conversions every backend shares.
//
//   StridedView v = strided_view(x);                 // x's shape and strides (rank <= 8)
//   int64_t at = v.offset_of(i);                     // element offset of the i-th logical element
//   coalesce_axes(shape, {&dst_strides, &src_strides});   // merge axes that are contiguous in all
//   float f = convert<float>(some_bf16);              // round to nearest even into 16-bit types
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/shape.h"

namespace wick {

class Tensor;

inline constexpr int max_kernel_rank = 8;

struct StridedView {
  int rank = 0;
  int64_t shape[max_kernel_rank] = {};
  int64_t strides[max_kernel_rank] = {};

  // Offset in elements of logical (row-major) element `linear`.
  WICK_HD int64_t offset_of(int64_t linear) const {
    int64_t at = 0;
    for (int axis = rank - 1; axis >= 0; --axis) {
      int64_t extent = shape[axis];
      at += (linear % extent) * strides[axis];
      linear /= extent;
    }
    return at;
  }
};

// A view of (shape, strides); throws if the rank exceeds max_kernel_rank.
StridedView make_strided_view(const Shape& shape, const Strides& strides, const char* op);
StridedView strided_view(const Tensor& tensor, const char* op = "kernel");

// Drops extent-1 axes and merges neighbouring axes that are contiguous with respect to each
// other in every operand. Shapes of all operands equal `shape`.
void coalesce_axes(Shape& shape, const std::vector<Strides*>& operand_strides);

// ---- element conversion ----
template <typename To, typename From>
WICK_HD To convert(From value) {
  using ComputeFrom = compute_t<From>;
  if constexpr (std::is_same_v<To, From>) {
    return value;
  } else if constexpr (std::is_same_v<To, bf16> || std::is_same_v<To, f16>) {
    return To(static_cast<float>(static_cast<ComputeFrom>(value)));
  } else if constexpr (std::is_floating_point_v<To>) {
    return static_cast<To>(static_cast<ComputeFrom>(value));
  } else if constexpr (std::is_floating_point_v<ComputeFrom>) {
    // Float -> integer: truncate toward zero, NaN -> 0, saturate at the integer range.
    double v = static_cast<double>(static_cast<ComputeFrom>(value));
    if (v != v) return To(0);
    if (v <= static_cast<double>(std::numeric_limits<To>::lowest())) return std::numeric_limits<To>::lowest();
    if (v >= static_cast<double>(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
    return static_cast<To>(v);
  } else {
    return static_cast<To>(value);  // integer -> integer wraps like C++
  }
}

}  // namespace wick
