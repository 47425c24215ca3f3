// The per-format decoders behind image_decode.h; only engine/data/image_*.cpp include this header.
//
//   image_codecs::Header h = image_codecs::read_png_header(bytes, size, "a.png");
//   image_codecs::Pixels p = image_codecs::decode_png(bytes, size, "a.png", max_pixels);
//   int orientation = image_codecs::exif_orientation(p.exif);
//
// Each decoder returns the pixels as stored (no orientation, no alpha handling) and throws WickError (Data)
// whose message starts with `name`. The libjpeg and libpng calls that can longjmp run in small functions
// that hold no object with a destructor, so a longjmp never skips one (C++ [csetjmp.syn]).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace wick::image_codecs {

struct Header {
  int64_t height = 0, width = 0;
  bool has_alpha = false;
  std::string color;          // "gray", "gray+alpha", "rgb", "rgba", "palette", "cmyk", "ycck", ...
  std::vector<uint8_t> exif;  // the EXIF block as found (TIFF bytes, maybe after "Exif\0\0"); empty if none
};

// 8-bit pixels, HWC, with 1 (gray), 2 (gray, alpha), 3 (RGB) or 4 (RGBA) channels.
struct Pixels {
  int64_t height = 0, width = 0;
  int channels = 0;
  std::vector<uint8_t> pixels;
  std::vector<uint8_t> exif;
};

// Throws WickError (Data) "<name>: <what> is W x H = N pixels, over the limit of M ..." when
// max_pixels > 0 and width * height > max_pixels.
void check_pixel_limit(int64_t height, int64_t width, int64_t max_pixels, const std::string& name, const char* what);

Header read_jpeg_header(const uint8_t* bytes, size_t size, const std::string& name);
// Gray JPEGs give 1 channel, everything else 3: YCbCr and RGB as libjpeg converts them, CMYK and YCCK
// (inverted when an Adobe APP14 marker is present, as Photoshop writes them) by Pillow's cmyk2rgb.
Pixels decode_jpeg(const uint8_t* bytes, size_t size, const std::string& name, int64_t max_pixels);

Header read_png_header(const uint8_t* bytes, size_t size, const std::string& name);
// Palettes and tRNS expanded, bit depths below 8 scaled, 16-bit samples reduced to their high byte
// (png_set_strip_16: what Pillow does for 16-bit RGB and RGBA). Gamma and colour profiles are not applied.
Pixels decode_png(const uint8_t* bytes, size_t size, const std::string& name, int64_t max_pixels);

Header read_webp_header(const uint8_t* bytes, size_t size, const std::string& name);
// RGB, or RGBA when the file has alpha. Animated files are refused.
Pixels decode_webp(const uint8_t* bytes, size_t size, const std::string& name, int64_t max_pixels);

// The EXIF Orientation tag (IFD0, 0x0112, SHORT) read with libexif from a TIFF block, with or without
// the "Exif\0\0" prefix; 1 when there is none, it is malformed or it is outside 1-8.
int exif_orientation(const std::vector<uint8_t>& exif);

}  // namespace wick::image_codecs
