// The 2-d sin-cos position table of MAE / DiT, which the small DiT adds to its patches and SD3 crops its
// pos_embed from (a buffer computed here when no weights give it).
//
//   std::vector<double> table = sincos_2d_table(96, 8);   // [64, 96]: row h·8 + w
#pragma once

#include <cstdint>
#include <vector>

namespace wick {

// [grid·grid, dim], row h·grid + w; the first half of the features encodes the column w, the second the row h.
// dim divisible by 4 (WickError otherwise).
std::vector<double> sincos_2d_table(int64_t dim, int64_t grid);

}  // namespace wick
