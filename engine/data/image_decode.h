// Training images in: JPEG (libjpeg-turbo), PNG (libpng) and WebP (libwebp) decoded to 8-bit RGB, with the
// EXIF orientation applied and transparency composited over a background (docs/dataset.md "Images").
//
//   Image rgb = load_image("photos/cat.jpg");              // Image{height, width, channels = 3}, HWC u8
//   ImageHeader header = probe_image_file("photos/cat.jpg");  // size as displayed, without decoding pixels
//   Tensor x = image_to_tensor(rgb);                       // f32 [3, H, W] in [-1, 1], for the VAE
//   Image gray = decode_image(bytes, {.alpha = AlphaMode::Discard}, "upload.png");
//
// The format is told by the first bytes, never by the file name. Anything that is not a whole, supported
// image (empty, truncated, not an image, more pixels than max_pixels, 12-bit JPEG, animated WebP, ...)
// throws WickError (kind Data) naming the file and the reason; no input crashes or aborts the process.
// Every call owns its decoder state, so threads may decode different images at once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/logging/image.h"
#include "runtime/tensor.h"

namespace wick {

enum class ImageFormat { Unknown, Jpeg, Png, Webp };

// "jpeg", "png", "webp" or "unknown".
const char* image_format_name(ImageFormat format);
// The format from the magic bytes: FF D8 FF (JPEG), 89 'PNG' 0D 0A 1A 0A, 'RIFF' .... 'WEBP'.
ImageFormat detect_image_format(const uint8_t* bytes, size_t size);

// What happens to an alpha channel (RGBA, gray + alpha, palette or gray with a tRNS transparent colour).
enum class AlphaMode {
  Composite,  // out = round((c * a + background * (255 - a)) / 255) in 8-bit sRGB values, as Pillow's paste
  Discard,    // the colour channels as stored: Pillow's convert("RGB"), what kohya and ai-toolkit do
};

// Pillow refuses images over 2 * Image.MAX_IMAGE_PIXELS = 2 * 89,478,485 pixels (DecompressionBombError).
inline constexpr int64_t default_max_image_pixels = 178'956'970;

struct ImageDecodeOptions {
  int64_t max_pixels = default_max_image_pixels;  // width * height from the header; 0 = no limit
  AlphaMode alpha = AlphaMode::Composite;
  Rgb background = {255, 255, 255};               // the colour under transparent pixels (Composite)
  bool apply_orientation = true;                  // rotate / mirror by the EXIF Orientation tag (1-8)
};

struct ImageHeader {
  ImageFormat format = ImageFormat::Unknown;
  int64_t height = 0, width = 0;                 // as decode_image returns it (after the orientation)
  int64_t stored_height = 0, stored_width = 0;   // as stored in the file
  int orientation = 1;                           // the EXIF Orientation tag, 1 when absent or not 1-8
  bool has_alpha = false;                        // an alpha channel or a tRNS transparent colour
  std::string color;                             // what the file stores: "gray", "rgb", "palette", "cmyk", ...
};

// Decodes a whole image file held in memory to RGB (channels = 3). `name` (a path) starts every error.
Image decode_image(const std::vector<uint8_t>& bytes, const ImageDecodeOptions& options = {},
                   const std::string& name = "image");
// Reads the header only (and the EXIF block): format, sizes, orientation. Checks max_pixels.
ImageHeader probe_image(const std::vector<uint8_t>& bytes, const ImageDecodeOptions& options = {},
                        const std::string& name = "image");
// The same from a file. A file whose first bytes are no known format is refused before the rest is read.
Image load_image(const std::string& path, const ImageDecodeOptions& options = {});
ImageHeader probe_image_file(const std::string& path, const ImageDecodeOptions& options = {});

// The image as displayed for EXIF Orientation 1-8 (2 mirror, 3 rotate 180, 4 flip, 5 transpose,
// 6 rotate 90 clockwise, 7 transverse, 8 rotate 90 counter-clockwise; as Pillow's exif_transpose).
Image apply_exif_orientation(const Image& image, int orientation);

// An RGB (or gray) u8 image -> f32 [C, H, W] on the CPU with x = (v / 255 - 0.5) / 0.5, as torchvision's
// ToTensor + Normalize([0.5], [0.5]) that the trainers feed their VAEs.
Tensor image_to_tensor(const Image& image);

}  // namespace wick
