#include "engine/data/image_resize.h"

// Debian's libstb ships the stb headers and a shared library holding their implementations: wick
// includes the header for the declarations only and links libstb.
#include <stb_image_resize.h>

#include <algorithm>
#include <cstring>

#include "runtime/error.h"

namespace wick {
namespace {

struct FilterName {
  ResizeFilter filter;
  const char* name;
};
constexpr FilterName filter_names[] = {
    {ResizeFilter::Auto, "auto"},
    {ResizeFilter::Area, "area"},
    {ResizeFilter::CatmullRom, "catmull-rom"},
    {ResizeFilter::Mitchell, "mitchell"},
    {ResizeFilter::Triangle, "triangle"},
};

void check_image(const Image& image, const char* op) {
  WICK_CHECK(image.channels >= 1 && image.channels <= 4 && image.height > 0 && image.width > 0 &&
                 static_cast<int64_t>(image.pixels.size()) == image.height * image.width * image.channels,
             op, ": expected a non-empty HWC u8 image with 1-4 channels, got ", image.height, "x", image.width, "x",
             image.channels, " holding ", image.pixels.size(), " bytes");
}

stbir_filter stb_filter_of(ResizeFilter filter) {
  switch (filter) {
    case ResizeFilter::Area: return STBIR_FILTER_BOX;
    case ResizeFilter::CatmullRom: return STBIR_FILTER_CATMULLROM;
    case ResizeFilter::Mitchell: return STBIR_FILTER_MITCHELL;
    case ResizeFilter::Triangle: return STBIR_FILTER_TRIANGLE;
    case ResizeFilter::Auto: break;
  }
  return STBIR_FILTER_CATMULLROM;
}

}  // namespace

const char* resize_filter_name(ResizeFilter filter) {
  for (const auto& entry : filter_names)
    if (entry.filter == filter) return entry.name;
  return "unknown";
}

ResizeFilter parse_resize_filter(const std::string& name) {
  std::string valid;
  for (const auto& entry : filter_names) {
    if (name == entry.name) return entry.filter;
    valid += valid.empty() ? "" : ", ";
    valid += entry.name;
  }
  WICK_FAIL(Config, "unknown resize filter '", name, "' (valid: ", valid, ")");
}

Image resize_image(const Image& image, int64_t height, int64_t width, const ResizeOptions& options) {
  check_image(image, "resize_image");
  WICK_CHECK(height > 0 && width > 0 && height <= (int64_t{1} << 30) && width <= (int64_t{1} << 30),
             "resize_image: target size must be positive, got ", height, "x", width);
  if (height == image.height && width == image.width) return image;
  ResizeFilter filter = options.filter;
  if (filter == ResizeFilter::Auto)
    filter = height <= image.height && width <= image.width ? ResizeFilter::Area : ResizeFilter::CatmullRom;
  Image out;
  out.height = height;
  out.width = width;
  out.channels = image.channels;
  out.pixels.resize(static_cast<size_t>(height * width * image.channels));
  const stbir_filter stb_filter = stb_filter_of(filter);
  const int ok = stbir_resize(image.pixels.data(), static_cast<int>(image.width), static_cast<int>(image.height),
                              static_cast<int>(image.width * image.channels), out.pixels.data(),
                              static_cast<int>(width), static_cast<int>(height),
                              static_cast<int>(width * image.channels), STBIR_TYPE_UINT8,
                              static_cast<int>(image.channels), STBIR_ALPHA_CHANNEL_NONE, 0, STBIR_EDGE_CLAMP,
                              STBIR_EDGE_CLAMP, stb_filter, stb_filter,
                              options.linear_light ? STBIR_COLORSPACE_SRGB : STBIR_COLORSPACE_LINEAR, nullptr);
  WICK_CHECK_KIND(Runtime, ok == 1, "resize_image: stb_image_resize failed (out of memory?) resizing ",
                  image.height, "x", image.width, " to ", height, "x", width);
  return out;
}

Image crop_image(const Image& image, int64_t top, int64_t left, int64_t height, int64_t width) {
  check_image(image, "crop_image");
  WICK_CHECK(top >= 0 && left >= 0 && height > 0 && width > 0 && top + height <= image.height &&
                 left + width <= image.width,
             "crop_image: window (top ", top, ", left ", left, ", ", height, "x", width, ") is not inside the ",
             image.height, "x", image.width, " image");
  Image out;
  out.height = height;
  out.width = width;
  out.channels = image.channels;
  out.pixels.resize(static_cast<size_t>(height * width * image.channels));
  const size_t row_bytes = static_cast<size_t>(width * image.channels);
  for (int64_t y = 0; y < height; ++y)
    std::memcpy(&out.pixels[static_cast<size_t>(y) * row_bytes],
                &image.pixels[static_cast<size_t>(((top + y) * image.width + left) * image.channels)], row_bytes);
  return out;
}

Image flip_horizontal(const Image& image) {
  check_image(image, "flip_horizontal");
  Image out = image;
  const int64_t c = image.channels;
  for (int64_t y = 0; y < image.height; ++y)
    for (int64_t x = 0; x < image.width; ++x)
      std::memcpy(&out.pixels[static_cast<size_t>((y * image.width + x) * c)],
                  &image.pixels[static_cast<size_t>((y * image.width + (image.width - 1 - x)) * c)],
                  static_cast<size_t>(c));
  return out;
}

}  // namespace wick
