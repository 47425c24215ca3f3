// Shapes and strides: plain vectors of int64 with the helpers every op front-end needs.
//
//   Shape s{2, 3, 4};  numel(s) == 24;  contiguous_strides(s) == Strides{12, 4, 1};
//   broadcast_shapes({2, 1, 4}, {3, 1}) == Shape{2, 3, 4};
//   normalize_axis(-1, 3, "sum") == 2;
//
// Strides count elements, not bytes. A stride of 0 marks a broadcast (expanded) dimension.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace wick {

using Shape = std::vector<int64_t>;
using Strides = std::vector<int64_t>;

int64_t numel(const Shape& shape);
Strides contiguous_strides(const Shape& shape);
// NumPy broadcasting; throws naming op and both shapes when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op = "broadcast");
// Maps a possibly negative axis into [0, rank); throws naming the op otherwise.
int64_t normalize_axis(int64_t axis, int64_t rank, const char* op);
std::string shape_string(const Shape& shape);

}  // namespace wick

namespace std {
// Lets error messages stream shapes: "got [2, 3]".
inline ostream& operator<<(ostream& out, const vector<int64_t>& shape) {
  return out << wick::shape_string(shape);
}
}  // namespace std
