#include "models/nn/position_table.h"

#include <cmath>

#include "runtime/error.h"

namespace wick {

std::vector<double> sincos_2d_table(int64_t dim, int64_t grid) {
  WICK_CHECK(dim % 4 == 0, "sincos_2d_table: width ", dim,
             " must be divisible by 4 for the 2-d sin-cos position table");
  const int64_t quarter = dim / 4;
  std::vector<double> table(static_cast<size_t>(grid * grid * dim));
  for (int64_t h = 0; h < grid; ++h)
    for (int64_t w = 0; w < grid; ++w) {
      double* row = table.data() + (h * grid + w) * dim;
      const double pos[2] = {static_cast<double>(w), static_cast<double>(h)};  // MAE's meshgrid(w, h) order
      for (int64_t half = 0; half < 2; ++half)
        for (int64_t i = 0; i < quarter; ++i) {
          double omega = 1.0 / std::pow(10000.0, static_cast<double>(i) / static_cast<double>(quarter));
          row[half * 2 * quarter + i] = std::sin(pos[half] * omega);
          row[half * 2 * quarter + quarter + i] = std::cos(pos[half] * omega);
        }
    }
  return table;
}

}  // namespace wick
