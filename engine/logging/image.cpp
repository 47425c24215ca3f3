#include "engine/logging/image.h"

#include <png.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>

#include "runtime/atomic_file.h"
#include "runtime/error.h"

namespace wick {
namespace {

uint8_t gray_of(Rgb color) { return static_cast<uint8_t>((color[0] + color[1] + color[2] + 1) / 3); }

void check_image(const Image& image, const char* op) {
  WICK_CHECK(image.channels == 1 || image.channels == 3, op, ": images have 1 (gray) or 3 (RGB) channels, got ",
             image.channels);
  WICK_CHECK(image.height > 0 && image.width > 0, op, ": empty image ", image.height, "x", image.width);
  WICK_CHECK(static_cast<int64_t>(image.pixels.size()) == image.height * image.width * image.channels, op,
             ": ", image.height, "x", image.width, "x", image.channels, " image holds ", image.pixels.size(),
             " bytes");
}

}  // namespace

Image::Image(int64_t height_, int64_t width_, int64_t channels_, Rgb fill)
    : height(height_), width(width_), channels(channels_) {
  WICK_CHECK(channels == 1 || channels == 3, "Image: 1 (gray) or 3 (RGB) channels, got ", channels);
  WICK_CHECK(height >= 0 && width >= 0, "Image: negative size ", height, "x", width);
  pixels.resize(static_cast<size_t>(height * width * channels));
  fill_rect(0, 0, height, width, fill);
}

void Image::set(int64_t y, int64_t x, Rgb color) {
  if (y < 0 || x < 0 || y >= height || x >= width) return;
  uint8_t* pixel = &pixels[(y * width + x) * channels];
  if (channels == 1) {
    pixel[0] = gray_of(color);
  } else {
    pixel[0] = color[0], pixel[1] = color[1], pixel[2] = color[2];
  }
}

void Image::fill_rect(int64_t y, int64_t x, int64_t rect_height, int64_t rect_width, Rgb color) {
  const int64_t y0 = std::max<int64_t>(y, 0), y1 = std::min(y + rect_height, height);
  const int64_t x0 = std::max<int64_t>(x, 0), x1 = std::min(x + rect_width, width);
  for (int64_t row = y0; row < y1; ++row)
    for (int64_t column = x0; column < x1; ++column) set(row, column, color);
}

// ---- PNG (libpng's simplified API: no setjmp/longjmp crosses C++ frames) ----

std::vector<uint8_t> encode_png(const Image& image) {
  check_image(image, "encode_png");
  png_image png{};
  png.version = PNG_IMAGE_VERSION;
  png.width = static_cast<png_uint_32>(image.width);
  png.height = static_cast<png_uint_32>(image.height);
  png.format = image.channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  const png_int_32 row_stride = static_cast<png_int_32>(image.width * image.channels);
  png_alloc_size_t size = 0;
  // First call measures, second writes.
  WICK_CHECK_KIND(Runtime, png_image_write_to_memory(&png, nullptr, &size, 0, image.pixels.data(), row_stride,
                                                     nullptr),
                  "encode_png: libpng: ", png.message);
  std::vector<uint8_t> bytes(size);
  WICK_CHECK_KIND(Runtime, png_image_write_to_memory(&png, bytes.data(), &size, 0, image.pixels.data(),
                                                     row_stride, nullptr),
                  "encode_png: libpng: ", png.message);
  bytes.resize(size);
  return bytes;
}

void save_png(const Image& image, const std::string& path) {
  const std::vector<uint8_t> bytes = encode_png(image);
  write_file_atomically(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

Image decode_png(const std::vector<uint8_t>& bytes) {
  png_image png{};
  png.version = PNG_IMAGE_VERSION;
  WICK_CHECK_KIND(Data, png_image_begin_read_from_memory(&png, bytes.data(), bytes.size()),
                  "decode_png: not a PNG (", bytes.size(), " bytes): ", png.message);
  const bool color = (png.format & PNG_FORMAT_FLAG_COLOR) != 0;
  png.format = color ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
  Image image;
  image.height = png.height, image.width = png.width, image.channels = color ? 3 : 1;
  image.pixels.resize(PNG_IMAGE_SIZE(png));
  if (!png_image_finish_read(&png, nullptr, image.pixels.data(), 0, nullptr)) {
    const std::string message = png.message;
    png_image_free(&png);
    WICK_FAIL(Data, "decode_png: corrupt PNG: ", message);
  }
  return image;
}

Image load_png(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  WICK_CHECK_KIND(Data, in.good(), "load_png: cannot open ", path);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  try {
    return decode_png(bytes);
  } catch (const WickError& error) {
    WICK_FAIL(Data, path, ": ", error.what());
  }
}

// ---- grids ----

std::vector<std::string> wrap_label(const std::string& text, int64_t max_chars) {
  std::vector<std::string> lines;
  if (max_chars < 1) max_chars = 1;
  size_t start = 0;
  while (start < text.size()) {
    while (start < text.size() && text[start] == ' ') ++start;  // no line starts with a space
    if (start >= text.size()) break;
    size_t length = std::min<size_t>(static_cast<size_t>(max_chars), text.size() - start);
    if (start + length < text.size()) {
      // Break after the last ' ', '/' or '-' that fits, when there is one.
      for (size_t i = length; i > 1; --i) {
        const char c = text[start + i - 1];
        if (c == ' ' || c == '/' || c == '-') {
          length = i;
          break;
        }
      }
    }
    std::string line = text.substr(start, length);
    while (!line.empty() && line.back() == ' ') line.pop_back();
    lines.push_back(line);
    start += length;
  }
  return lines;
}

int64_t grid_label_height(const std::vector<std::string>& labels, int64_t cell_width, int64_t label_scale) {
  if (labels.empty()) return 0;
  const int64_t max_chars = std::max<int64_t>(1, (cell_width + label_scale) / (kCharAdvance * label_scale));
  size_t n_lines = 1;
  for (const auto& label : labels) n_lines = std::max(n_lines, wrap_label(label, max_chars).size());
  // One spacing row above the text, then the lines.
  return (static_cast<int64_t>(n_lines) * kLineHeight + 1) * label_scale;
}

Image make_image_grid(const Tensor& images, const ImageGridOptions& options) {
  WICK_CHECK(images.defined() && images.dim() == 4, "make_image_grid: expected images [N, C, H, W], got ",
             images.defined() ? images.describe() : std::string("an undefined tensor"));
  const int64_t n = images.size(0), n_channels = images.size(1), height = images.size(2), width = images.size(3);
  WICK_CHECK(n_channels == 1 || n_channels == 3, "make_image_grid: C must be 1 or 3, got ", images.describe());
  WICK_CHECK(n > 0 && height > 0 && width > 0, "make_image_grid: empty images ", images.describe());
  WICK_CHECK(options.n_columns > 0 && options.scale > 0 && options.padding >= 0 && options.label_scale > 0,
             "make_image_grid: n_columns, scale and label_scale must be positive and padding >= 0 (got ",
             options.n_columns, ", ", options.scale, ", ", options.label_scale, ", ", options.padding, ")");
  WICK_CHECK(options.labels.empty() || static_cast<int64_t>(options.labels.size()) == n,
             "make_image_grid: ", options.labels.size(), " labels for ", n, " images");
  WICK_CHECK(options.value_max > options.value_min, "make_image_grid: value_max (", options.value_max,
             ") must exceed value_min (", options.value_min, ")");

  const std::vector<float> values = images.to_vector<float>();
  const int64_t n_columns = std::min(options.n_columns, n);
  const int64_t n_rows = (n + n_columns - 1) / n_columns;
  const int64_t cell_width = width * options.scale, image_height = height * options.scale;
  const int64_t label_height = grid_label_height(options.labels, cell_width, options.label_scale);
  const int64_t cell_height = image_height + label_height;
  const int64_t pad = options.padding;
  Image grid(n_rows * (cell_height + pad) + pad, n_columns * (cell_width + pad) + pad, n_channels,
             options.background);

  const float range = options.value_max - options.value_min;
  const int64_t max_chars = std::max<int64_t>(1, (cell_width + options.label_scale) /
                                                     (kCharAdvance * options.label_scale));
  for (int64_t index = 0; index < n; ++index) {
    const int64_t cell_x = pad + (index % n_columns) * (cell_width + pad);
    const int64_t cell_y = pad + (index / n_columns) * (cell_height + pad);
    const bool label_above = options.label_position == LabelPosition::Above;
    const int64_t image_y = cell_y + (label_above ? label_height : 0);
    for (int64_t c = 0; c < n_channels; ++c) {
      const float* plane = values.data() + ((index * n_channels + c) * height) * width;
      for (int64_t y = 0; y < height; ++y)
        for (int64_t x = 0; x < width; ++x) {
          float unit = (plane[y * width + x] - options.value_min) / range;
          if (!(unit >= 0.0f)) unit = 0.0f;  // also maps NaN to black
          if (unit > 1.0f) unit = 1.0f;
          const auto byte = static_cast<uint8_t>(std::lround(unit * 255.0f));
          for (int64_t dy = 0; dy < options.scale; ++dy)
            for (int64_t dx = 0; dx < options.scale; ++dx)
              grid.at(image_y + y * options.scale + dy, cell_x + x * options.scale + dx, c) = byte;
        }
    }
    if (options.labels.empty()) continue;
    const std::vector<std::string> lines = wrap_label(options.labels[index], max_chars);
    int64_t text_y = (label_above ? cell_y : cell_y + image_height) + options.label_scale;
    for (const auto& line : lines) {
      const int64_t text_x = cell_x + (cell_width - text_width(line, options.label_scale)) / 2;
      draw_text(grid, text_x, text_y, line, options.label_color, options.label_scale);
      text_y += kLineHeight * options.label_scale;
    }
  }
  return grid;
}

}  // namespace wick
