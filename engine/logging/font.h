// A small built-in 5x7 bitmap font for labels on sample grids and tick labels on plots.
//
//   Image img = ...;
//   draw_text(img, 4, 2, "Ankle boot", {0, 0, 0});            // top-left corner at (x=4, y=2)
//   int64_t w = text_width("step 100");                        // pixels at scale 1
//
// Each glyph is 5 columns x 7 rows inside a 6 x 8 cell (one column and one row of spacing). It covers
// printable ASCII (32..126); any other byte is drawn as '?'. g, p, q and y are drawn one row lower, so
// their tails reach into the spacing row. The glyph table is wick's own data.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace wick {

struct Image;

inline constexpr int64_t kGlyphWidth = 5, kGlyphHeight = 7;
inline constexpr int64_t kCharAdvance = 6, kLineHeight = 8;  // cell size, spacing included

using Rgb = std::array<uint8_t, 3>;

// The 7 rows of a character, top first; bit 4 is the leftmost column.
const std::array<uint8_t, 7>& glyph_rows(char c);
// True for the letters drawn one row lower (g, p, q, y).
bool glyph_descends(char c);

// Width in pixels of `text` on one line at `scale` (no trailing spacing column).
int64_t text_width(std::string_view text, int64_t scale = 1);

// Draws `text` with its cell's top-left corner at (x, y), each font pixel a scale x scale block;
// pixels outside the image are clipped. Gray images take the colour's mean.
void draw_text(Image& image, int64_t x, int64_t y, std::string_view text, Rgb color, int64_t scale = 1);

}  // namespace wick
