// Maximum, sum and dot product of one f32 row, written as 16 independent lanes so that GCC vectorizes
// them without -ffast-math (a plain `for (j) sum += s[j]` is one serial chain: 4 cycles an element);
// lane_sum, the same in f64 over any term. The lanes are combined in a fixed order, so a result
// depends only on the row, never on the thread.
//
//   float m = cpu::row_max(scores, n), s = cpu::row_sum(probs, n), d = cpu::row_dot(a, b, n);
//   double squares = cpu::lane_sum(n, [&](int64_t j) { double c = x[j] - mean; return c * c; });
#pragma once

#include <cstdint>
#include <limits>

namespace wick::cpu {

inline constexpr int row_lanes = 16;

// The 16 lanes folded pairwise (8 + 8, 4 + 4, ...): a fixed tree.
template <typename Op>
inline float fold_lanes(float* lanes, Op op) {
  for (int width = row_lanes / 2; width >= 1; width /= 2)
    for (int l = 0; l < width; ++l) lanes[l] = op(lanes[l], lanes[l + width]);
  return lanes[0];
}

// -inf for an empty row; NaN-free rows only (a NaN may or may not win, as with std::max).
inline float row_max(const float* x, int64_t n) {
  float lanes[row_lanes];
  for (float& l : lanes) l = -std::numeric_limits<float>::infinity();
  int64_t j = 0;
  for (; j + row_lanes <= n; j += row_lanes)
    for (int l = 0; l < row_lanes; ++l) lanes[l] = x[j + l] > lanes[l] ? x[j + l] : lanes[l];
  for (int l = 0; j + l < n; ++l) lanes[l] = x[j + l] > lanes[l] ? x[j + l] : lanes[l];
  return fold_lanes(lanes, [](float a, float b) { return a > b ? a : b; });
}

inline float row_sum(const float* x, int64_t n) {
  float lanes[row_lanes] = {};
  int64_t j = 0;
  for (; j + row_lanes <= n; j += row_lanes)
    for (int l = 0; l < row_lanes; ++l) lanes[l] += x[j + l];
  for (int l = 0; j + l < n; ++l) lanes[l] += x[j + l];
  return fold_lanes(lanes, [](float a, float b) { return a + b; });
}

// The sum over j < n of term(j) in f64, 8 lanes.
template <typename Term>
inline double lane_sum(int64_t n, const Term& term) {
  double lanes[8] = {};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int l = 0; l < 8; ++l) lanes[l] += term(j + l);
  for (int l = 0; j + l < n; ++l) lanes[l] += term(j + l);
  return ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
}

inline float row_dot(const float* x, const float* y, int64_t n) {
  float lanes[row_lanes] = {};
  int64_t j = 0;
  for (; j + row_lanes <= n; j += row_lanes)
    for (int l = 0; l < row_lanes; ++l) lanes[l] += x[j + l] * y[j + l];
  for (int l = 0; j + l < n; ++l) lanes[l] += x[j + l] * y[j + l];
  return fold_lanes(lanes, [](float a, float b) { return a + b; });
}

}  // namespace wick::cpu
