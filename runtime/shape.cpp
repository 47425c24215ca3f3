#include "runtime/shape.h"

#include "runtime/error.h"

namespace wick {

int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t extent : shape) n *= extent;
  return n;
}

Strides contiguous_strides(const Shape& shape) {
  Strides strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return strides;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t ea = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t eb = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    WICK_CHECK(ea == eb || ea == 1 || eb == 1, op, ": shapes ", shape_string(a), " and ", shape_string(b),
               " do not broadcast (dimension ", i, ": ", ea, " vs ", eb, ")");
    out[i] = ea == 1 ? eb : ea;
  }
  return out;
}

int64_t normalize_axis(int64_t axis, int64_t rank, const char* op) {
  int64_t normalized = axis < 0 ? axis + rank : axis;
  WICK_CHECK(normalized >= 0 && normalized < std::max<int64_t>(rank, 1), op, ": axis ", axis,
             " is out of range for a tensor of rank ", rank);
  return normalized;
}

std::string shape_string(const Shape& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

}  // namespace wick
