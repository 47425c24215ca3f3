#include "models/vae/vae_tiling.h"

#include <algorithm>
#include <limits>

#include "engine/autograd/grad_mode.h"
#include "engine/autograd/ops_elementwise.h"
#include "engine/autograd/ops_layout.h"
#include "runtime/error.h"
#include "runtime/ops/creation.h"

namespace wick::vae {
namespace {

// Positions e * num / den, which must be whole.
int64_t scaled(int64_t e, const TileGrid& grid, const char* what) {
  WICK_CHECK((e * grid.scale_num) % grid.scale_den == 0, "tiled_apply: ", what, " ", e, " times ", grid.scale_num,
             " / ", grid.scale_den, " is not a whole number of output positions");
  return e * grid.scale_num / grid.scale_den;
}

// The weights of one axis as a tensor [1, 1, n, 1] (rows) or [1, 1, 1, n] (columns).
Tensor weight_tensor(const std::vector<float>& weights, bool rows, DType dtype, Device device) {
  const int64_t n = static_cast<int64_t>(weights.size());
  Shape shape = rows ? Shape{1, 1, n, 1} : Shape{1, 1, 1, n};
  return Tensor::from_vector<float>(weights, shape).to(dtype).to(device);
}

}  // namespace

std::vector<TileSpan> tile_spans(int64_t extent, int64_t tile, int64_t overlap, int64_t align) {
  WICK_CHECK(align > 0 && extent > 0 && tile > 0, "tile_spans: extent ", extent, ", tile ", tile, " and align ", align,
             " must be positive");
  if (extent <= tile) return {TileSpan{0, extent}};
  WICK_CHECK(extent % align == 0 && tile % align == 0, "tile_spans: extent ", extent, " and tile ", tile,
             " must be multiples of ", align);
  WICK_CHECK(overlap >= 0 && overlap < tile, "tile_spans: overlap ", overlap, " must be in [0, tile = ", tile, ")");
  // In units of align: E positions, tiles of T, overlap at least O (rounded up), so steps of at most T - O.
  const int64_t e = extent / align, t = tile / align, o = (overlap + align - 1) / align;
  WICK_CHECK(o < t, "tile_spans: overlap ", overlap, " rounded up to a multiple of ", align, " is not below the tile ",
             tile);
  const int64_t n_tiles = 1 + (e - t + (t - o) - 1) / (t - o);
  std::vector<TileSpan> spans;
  for (int64_t i = 0; i < n_tiles; ++i) spans.push_back(TileSpan{i * (e - t) / (n_tiles - 1) * align, tile});
  return spans;
}

std::vector<std::vector<float>> blend_weights(const std::vector<TileSpan>& spans, double ramp) {
  WICK_CHECK(!spans.empty(), "blend_weights: no tiles");
  int64_t extent = 0;
  for (const TileSpan& s : spans) extent = std::max(extent, s.start + s.size);
  std::vector<std::vector<double>> raw;
  std::vector<double> total(static_cast<size_t>(extent), 0.0);
  constexpr double kFlat = std::numeric_limits<double>::infinity();
  for (const TileSpan& s : spans) {
    std::vector<double> w(static_cast<size_t>(s.size));
    const bool left = s.start > 0, right = s.start + s.size < extent;
    for (int64_t u = 0; u < s.size; ++u) {
      const double from_left = left && ramp > 0 ? (static_cast<double>(u) + 0.5) / ramp : kFlat;
      const double from_right = right && ramp > 0 ? (static_cast<double>(s.size - u) - 0.5) / ramp : kFlat;
      w[static_cast<size_t>(u)] = std::min({1.0, from_left, from_right});
      total[static_cast<size_t>(s.start + u)] += w[static_cast<size_t>(u)];
    }
    raw.push_back(std::move(w));
  }
  std::vector<std::vector<float>> out;
  for (size_t i = 0; i < spans.size(); ++i) {
    std::vector<float> w(raw[i].size());
    for (size_t u = 0; u < w.size(); ++u) {
      const double sum = total[static_cast<size_t>(spans[i].start) + u];
      WICK_CHECK(sum > 0, "blend_weights: position ", spans[i].start + static_cast<int64_t>(u), " has no tile");
      w[u] = static_cast<float>(raw[i][u] / sum);
    }
    out.push_back(std::move(w));
  }
  return out;
}

Tensor tiled_apply(const Tensor& x, const TileGrid& grid, const std::function<Tensor(const Tensor&)>& fn) {
  WICK_CHECK(x.dim() == 4, "tiled_apply: expected [B, C, H, W], got ", x.describe());
  WICK_CHECK(grid.scale_num > 0 && grid.scale_den > 0, "tiled_apply: scale ", grid.scale_num, " / ", grid.scale_den,
             " must be positive");
  const int64_t height = x.size(2), width = x.size(3);
  if (height <= grid.tile && width <= grid.tile) return fn(x);
  autograd::NoGradGuard no_grad;
  const std::vector<TileSpan> rows = tile_spans(height, grid.tile, grid.overlap, grid.align);
  const std::vector<TileSpan> columns = tile_spans(width, grid.tile, grid.overlap, grid.align);
  auto to_output = [&](std::vector<TileSpan> spans, const char* what) {
    for (TileSpan& s : spans) {
      s.start = scaled(s.start, grid, what);
      s.size = scaled(s.size, grid, what);
    }
    return spans;
  };
  const std::vector<TileSpan> out_rows = to_output(rows, "a row tile"),
                              out_columns = to_output(columns, "a column tile");
  const double ramp = static_cast<double>(grid.overlap * grid.scale_num) / static_cast<double>(grid.scale_den);
  const std::vector<std::vector<float>> row_weights = blend_weights(out_rows, ramp);
  const std::vector<std::vector<float>> column_weights = blend_weights(out_columns, ramp);
  const int64_t out_height = scaled(height, grid, "the height"), out_width = scaled(width, grid, "the width");

  Tensor out;  // [B, C', H·s, W·s] in the accumulation dtype, made once the first tile tells C'
  DType result_dtype = x.dtype();
  for (size_t i = 0; i < rows.size(); ++i) {
    for (size_t j = 0; j < columns.size(); ++j) {
      Tensor tile = x.narrow(2, rows[i].start, rows[i].size).narrow(3, columns[j].start, columns[j].size);
      Tensor y = fn(tile);
      const TileSpan& r = out_rows[i];
      const TileSpan& c = out_columns[j];
      WICK_CHECK(y.dim() == 4 && y.size(0) == x.size(0) && y.size(2) == r.size && y.size(3) == c.size,
                 "tiled_apply: the function made ", y.describe(), " from the tile ", tile.describe(), ", expected [",
                 x.size(0), ", C, ", r.size, ", ", c.size, "]");
      if (!out.defined()) {
        result_dtype = y.dtype();
        const DType accumulate = y.dtype() == DType::F64 ? DType::F64 : DType::F32;
        out = zeros({x.size(0), y.size(1), out_height, out_width}, accumulate, y.device());
      }
      WICK_CHECK(y.size(1) == out.size(1), "tiled_apply: tiles of ", y.size(1), " and ", out.size(1), " channels");
      Tensor weighted = autograd::to_dtype(y, out.dtype()) *
                        weight_tensor(row_weights[i], true, out.dtype(), out.device()) *
                        weight_tensor(column_weights[j], false, out.dtype(), out.device());
      y = Tensor();
      Tensor region = out.narrow(2, r.start, r.size).narrow(3, c.start, c.size);
      region.copy_from(region + weighted);
    }
  }
  return autograd::to_dtype(out, result_dtype);
}

}  // namespace wick::vae
