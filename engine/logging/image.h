// 8-bit images, PNG files (through libpng) and labelled sample grids.
//
//   Tensor samples = ...;                                      // [N, C, H, W] in [-1, 1], C = 1 or 3
//   Image grid = make_image_grid(samples, {.n_columns = 5, .scale = 3, .labels = class_names});
//   save_png(grid, run_dir + "/samples/step_100.png");
//   std::vector<uint8_t> png = encode_png(grid);               // in memory, for TensorBoard
//   Image back = decode_png(png);                              // the same pixels
//
// Pixels are stored row-major, interleaved (HWC): gray images have 1 channel, colour images 3 (RGB).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/logging/font.h"
#include "runtime/tensor.h"

namespace wick {

struct Image {
  int64_t height = 0, width = 0, channels = 0;  // channels: 1 (gray) or 3 (RGB)
  std::vector<uint8_t> pixels;                  // height * width * channels bytes, HWC

  Image() = default;
  // A height x width image with every pixel set to `fill` (gray images take the colour's mean).
  Image(int64_t height, int64_t width, int64_t channels, Rgb fill = {0, 0, 0});

  uint8_t& at(int64_t y, int64_t x, int64_t channel = 0) { return pixels[(y * width + x) * channels + channel]; }
  uint8_t at(int64_t y, int64_t x, int64_t channel = 0) const {
    return pixels[(y * width + x) * channels + channel];
  }
  // Sets one pixel; coordinates outside the image are ignored (drawing clips).
  void set(int64_t y, int64_t x, Rgb color);
  void fill_rect(int64_t y, int64_t x, int64_t height, int64_t width, Rgb color);
};

// PNG bytes of an 8-bit gray or RGB image (zlib level 6). Throws WickError on a malformed Image.
std::vector<uint8_t> encode_png(const Image& image);
// Writes the PNG to `path` through a temporary file, fsync and a rename (write_file_atomically), so
// readers never see half a file. Throws WickError (Data) naming the path and the reason when it cannot
// be written; the temporary is removed.
void save_png(const Image& image, const std::string& path);
// Decodes PNG bytes into an 8-bit gray or RGB image (alpha dropped, palettes and 16-bit reduced).
// Throws WickError (Data) on bytes that are not a PNG.
Image decode_png(const std::vector<uint8_t>& bytes);
Image load_png(const std::string& path);

enum class LabelPosition { Below, Above };

struct ImageGridOptions {
  int64_t n_columns = 8;
  int64_t padding = 2;          // output pixels between cells and around the border
  int64_t scale = 1;            // each image pixel becomes scale x scale pixels
  float value_min = -1.0f;      // the value drawn black; [-1, 1] by default, {0, 1} for [0, 1] data
  float value_max = 1.0f;       // the value drawn white; values outside are clamped
  std::vector<std::string> labels;  // empty, or one per image; long labels wrap onto more lines
  LabelPosition label_position = LabelPosition::Below;
  int64_t label_scale = 1;      // font scale of the labels
  Rgb background = {255, 255, 255};
  Rgb label_color = {20, 20, 20};
};

// Lays the N images of `images` [N, C, H, W] (C = 1 or 3; any float dtype, any device) out in rows of
// n_columns cells, each cell scaled by `scale`, with the labels drawn in the font under (or above) it.
// The result is gray for C = 1 and RGB for C = 3. Size: width = n_columns * (W*scale + padding) + padding,
// height = n_rows * (H*scale + label_height + padding) + padding, label_height = 0 without labels.
Image make_image_grid(const Tensor& images, const ImageGridOptions& options = {});

// The height in pixels of the label band for `labels` in cells `cell_width` pixels wide.
int64_t grid_label_height(const std::vector<std::string>& labels, int64_t cell_width, int64_t label_scale);
// Splits `text` into lines of at most max_chars characters, breaking after ' ', '/' or '-' when it can.
std::vector<std::string> wrap_label(const std::string& text, int64_t max_chars);

}  // namespace wick
