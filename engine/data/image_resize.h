// Resizing, cropping and mirroring 8-bit images (HWC, any channel count), for fitting training images to
// their buckets. Resampling is stb_image_resize's (Debian libstb-dev), on the stored 8-bit sRGB values
// as Pillow and OpenCV resample (docs/dataset.md "Resizing").
//
//   Image small = resize_image(rgb, 768, 1024);           // Auto: area when shrinking, Catmull-Rom otherwise
//   Image sharp = resize_image(rgb, 768, 1024, {.filter = ResizeFilter::Mitchell});
//   Image tile = crop_image(small, 0, 128, 768, 768);     // top, left, height, width
//   Image mirrored = flip_horizontal(tile);
#pragma once

#include <cstdint>
#include <string>

#include "engine/logging/image.h"

namespace wick {

enum class ResizeFilter {
  Auto,        // Area when neither side grows (kohya's rule: cv2.INTER_AREA), else CatmullRom
  Area,        // pixel-area average (stb's box/trapezoid filter): cv2.INTER_AREA when shrinking
  CatmullRom,  // cubic with a = -0.5, support scaled when shrinking: Pillow's BICUBIC (ai-toolkit's filter)
  Mitchell,    // Mitchell-Netravali B = C = 1/3 (stb's default for shrinking)
  Triangle,    // linear, support scaled when shrinking: Pillow's BILINEAR
};

// "auto", "area", "catmull-rom", "mitchell", "triangle".
const char* resize_filter_name(ResizeFilter filter);
// The filter of that name; an unknown name throws WickError (Config) listing the valid ones.
ResizeFilter parse_resize_filter(const std::string& name);

struct ResizeOptions {
  ResizeFilter filter = ResizeFilter::Auto;
  // Resample in linear light (8-bit sRGB decoded, filtered, re-encoded) instead of on the stored values.
  // Off by default: Pillow, OpenCV and so every Python trainer filter the stored sRGB values.
  bool linear_light = false;
};

// `image` resampled to height x width (both > 0); edges clamp (the border pixel repeats).
Image resize_image(const Image& image, int64_t height, int64_t width, const ResizeOptions& options = {});
// The height x width window whose top-left corner is (top, left); it must lie inside the image.
Image crop_image(const Image& image, int64_t top, int64_t left, int64_t height, int64_t width);
// Mirrored left to right.
Image flip_horizontal(const Image& image);

}  // namespace wick
