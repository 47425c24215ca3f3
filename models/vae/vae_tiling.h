// Overlapping tiles for encoding and decoding images too large to run at once: a function applied to
// tiles of its input, the results blended with linear ramps where neighbours overlap. Memory then
// depends on the tile size, not the image size (docs/vae.md "Tiling").
//
//   std::vector<TileSpan> spans = tile_spans(2048, 512, 128, 8);   // 5 tiles of 512, starts 0, 384, ... 1536
//   TileGrid grid{.tile = 64, .overlap = 16, .align = 1, .scale_num = 8, .scale_den = 1};   // decode: latents
//   Tensor images = tiled_apply(z, grid, [&](const Tensor& tile) { return decoder->forward(tile); });
//
// Unlike diffusers' tiled_encode / tiled_decode (fixed strides, smaller tiles at the right and bottom
// edges, each tile blended into its left and upper neighbours only), every tile here has the full
// size (the starts are spread evenly from 0 to extent - tile) and the blend is a partition of unity:
// at every output position the weights of the tiles covering it sum to 1.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "runtime/tensor.h"

namespace wick::vae {

// How AutoencoderKL::encode / decode tile (in image pixels, for both directions).
struct VaeTiling {
  // Image pixels per tile side, a multiple of the VAE's downscale factor (8 for the real ones);
  // 0: never tile. Images whose height and width both fit in one tile run untiled.
  int64_t tile_size = 0;
  // Image pixels that neighbouring tiles share at least (rounded up to the downscale factor), below
  // tile_size; < 0: tile_size / 4. The blend ramps are this long.
  int64_t overlap = -1;
};

struct TileSpan {
  int64_t start = 0, size = 0;
};

// Tiles covering [0, extent): one of size `extent` when extent <= tile; else the fewest tiles of size
// `tile` whose starts are multiples of `align`, spread evenly from 0 to extent - tile, so that
// neighbours share at least `overlap`. extent and tile must be multiples of align, 0 <= overlap < tile.
std::vector<TileSpan> tile_spans(int64_t extent, int64_t tile, int64_t overlap, int64_t align);

// Per tile, its `size` blend weights along one axis: 1, falling linearly to 0 over `ramp` positions
// at each edge shared with a neighbour (not at the extent's ends), then divided by the sum of the
// weights of all tiles at each position; so every weight is > 0 and they sum to 1 at each position.
// ramp <= 0: flat weights (overlaps averaged).
std::vector<std::vector<float>> blend_weights(const std::vector<TileSpan>& spans, double ramp);

// A tiling of the input's last two axes; the function maps an input extent e to e * scale_num /
// scale_den (encode: 1 / f, decode: f / 1).
struct TileGrid {
  int64_t tile = 0;     // input positions per tile side
  int64_t overlap = 0;  // input positions shared at least
  int64_t align = 1;    // tile starts are multiples of this (input positions)
  int64_t scale_num = 1, scale_den = 1;
};

// fn applied to each tile x[:, :, y0:y0+th, x0:x0+tw] of x [B, C, H, W] (tiles from tile_spans on
// each axis), its results [B, C', th·s, tw·s] (s = scale_num / scale_den) blended with the separable
// weights of blend_weights (ramp = overlap·s) into [B, C', H·s, W·s], accumulated in f32 (f64 for
// f64), returned in the dtype fn returns. x fitting one tile: fn(x) itself. H, W and the tile must
// map to whole output positions (WickError (Usage) otherwise).
Tensor tiled_apply(const Tensor& x, const TileGrid& grid, const std::function<Tensor(const Tensor&)>& fn);

}  // namespace wick::vae
