// PNG through libpng's full (not simplified) read API, for control over 16-bit reduction and alpha and
// for the eXIf chunk. Chunks after the image data are not read (nor their CRCs checked), as Pillow's
// load() does not; only an eXIf chunk there is looked for.
//
// libpng reports a fatal error by calling the error callback, which must not return: it longjmps to
// png_jmpbuf. As in image_jpeg.cpp, every libpng call that can fail runs in a guarded_* function that
// sets the jump point and holds only trivially destructible locals; PngDecoder owns the structs.
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>

#include "engine/data/image_codecs.h"
#include "runtime/error.h"

namespace wick::image_codecs {
namespace {

struct PngDecoder {
  png_structp png = nullptr;
  png_infop info = nullptr;
  const uint8_t* bytes = nullptr;
  size_t size = 0, offset = 0;
  char message[256] = {};

  PngDecoder() = default;
  ~PngDecoder() {
    if (png != nullptr) png_destroy_read_struct(&png, info != nullptr ? &info : nullptr, nullptr);
  }
  PngDecoder(const PngDecoder&) = delete;
  PngDecoder& operator=(const PngDecoder&) = delete;
};

void on_error(png_structp png, png_const_charp message) {
  auto* decoder = static_cast<PngDecoder*>(png_get_error_ptr(png));
  std::snprintf(decoder->message, sizeof(decoder->message), "%s", message != nullptr ? message : "error");
  png_longjmp(png, 1);
}

void on_warning(png_structp, png_const_charp) {}  // recoverable: a bad ancillary chunk is skipped

void read_from_memory(png_structp png, png_bytep out, size_t length) {
  auto* decoder = static_cast<PngDecoder*>(png_get_io_ptr(png));
  if (length > decoder->size - decoder->offset) png_error(png, "truncated file (the data ends early)");
  std::memcpy(out, decoder->bytes + decoder->offset, length);
  decoder->offset += length;
}

// ---- guarded libpng calls ----

bool guarded_read_info(PngDecoder* decoder) {
  if (setjmp(png_jmpbuf(decoder->png))) return false;
  png_set_read_fn(decoder->png, decoder, read_from_memory);
  png_read_info(decoder->png, decoder->info);
  return true;
}

// Palette -> RGB, gray below 8 bits -> 8, a tRNS colour -> an alpha channel, 16 bits -> the high byte.
bool guarded_set_transforms(PngDecoder* decoder) {
  if (setjmp(png_jmpbuf(decoder->png))) return false;
  png_set_expand(decoder->png);
  png_set_strip_16(decoder->png);
  png_set_interlace_handling(decoder->png);
  png_read_update_info(decoder->png, decoder->info);
  return true;
}

bool guarded_read_image(PngDecoder* decoder, png_bytepp rows) {
  if (setjmp(png_jmpbuf(decoder->png))) return false;
  png_read_image(decoder->png, rows);
  return true;
}

// ---- C++ side ----

void open_header(PngDecoder& decoder, const uint8_t* bytes, size_t size, const std::string& name) {
  decoder.bytes = bytes;
  decoder.size = size;
  decoder.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &decoder, on_error, on_warning);
  WICK_CHECK_KIND(Runtime, decoder.png != nullptr, name, ": libpng: png_create_read_struct failed");
  decoder.info = png_create_info_struct(decoder.png);
  WICK_CHECK_KIND(Runtime, decoder.info != nullptr, name, ": libpng: png_create_info_struct failed");
  if (!guarded_read_info(&decoder)) WICK_FAIL(Data, name, ": not a readable PNG: ", decoder.message);
}

// An eXIf chunk after the image data, which libpng would only reach after decoding every IDAT chunk (the
// header probe does not decode): found by stepping over the chunks (4-byte big-endian length, 4-byte type,
// data, 4-byte CRC), every step bounds-checked.
std::vector<uint8_t> late_exif(const uint8_t* bytes, size_t size) {
  size_t at = 8;  // after the signature
  while (size >= 12 && at <= size - 12) {
    const uint8_t* chunk = bytes + at;
    const size_t length = (size_t{chunk[0]} << 24) | (size_t{chunk[1]} << 16) | (size_t{chunk[2]} << 8) | chunk[3];
    if (length > size - at - 12) break;
    if (std::memcmp(chunk + 4, "eXIf", 4) == 0) return std::vector<uint8_t>(chunk + 8, chunk + 8 + length);
    if (std::memcmp(chunk + 4, "IEND", 4) == 0) break;
    at += 12 + length;
  }
  return {};
}

// The eXIf chunk, before the image data (as libpng read it) or after it.
std::vector<uint8_t> exif_of(const PngDecoder& decoder) {
  png_uint_32 n_bytes = 0;
  png_bytep exif = nullptr;
  if (png_get_eXIf_1(decoder.png, decoder.info, &n_bytes, &exif) != 0 && exif != nullptr && n_bytes > 0)
    return std::vector<uint8_t>(exif, exif + n_bytes);
  return late_exif(decoder.bytes, decoder.size);
}

const char* color_name(int color_type) {
  switch (color_type) {
    case PNG_COLOR_TYPE_GRAY: return "gray";
    case PNG_COLOR_TYPE_GRAY_ALPHA: return "gray+alpha";
    case PNG_COLOR_TYPE_PALETTE: return "palette";
    case PNG_COLOR_TYPE_RGB: return "rgb";
    case PNG_COLOR_TYPE_RGB_ALPHA: return "rgba";
    default: return "unknown";
  }
}

Header header_of(const PngDecoder& decoder) {
  Header header;
  header.height = png_get_image_height(decoder.png, decoder.info);
  header.width = png_get_image_width(decoder.png, decoder.info);
  const int color_type = png_get_color_type(decoder.png, decoder.info);
  header.has_alpha = (color_type & PNG_COLOR_MASK_ALPHA) != 0 ||
                     png_get_valid(decoder.png, decoder.info, PNG_INFO_tRNS) != 0;
  header.color = color_name(color_type);
  if (png_get_bit_depth(decoder.png, decoder.info) == 16) header.color += "16";
  header.exif = exif_of(decoder);
  return header;
}

}  // namespace

Header read_png_header(const uint8_t* bytes, size_t size, const std::string& name) {
  PngDecoder decoder;
  open_header(decoder, bytes, size, name);
  return header_of(decoder);
}

Pixels decode_png(const uint8_t* bytes, size_t size, const std::string& name, int64_t max_pixels) {
  PngDecoder decoder;
  open_header(decoder, bytes, size, name);
  const Header header = header_of(decoder);
  check_pixel_limit(header.height, header.width, max_pixels, name, "PNG");
  if (!guarded_set_transforms(&decoder)) WICK_FAIL(Data, name, ": not a readable PNG: ", decoder.message);

  Pixels pixels;
  pixels.height = header.height;
  pixels.width = header.width;
  pixels.channels = png_get_channels(decoder.png, decoder.info);
  const size_t row_bytes = png_get_rowbytes(decoder.png, decoder.info);
  WICK_CHECK_KIND(Runtime, pixels.channels >= 1 && pixels.channels <= 4 &&
                               row_bytes == static_cast<size_t>(pixels.width * pixels.channels),
                  name, ": libpng gave ", pixels.channels, " channels and ", row_bytes, "-byte rows for width ",
                  pixels.width);
  pixels.pixels.resize(row_bytes * static_cast<size_t>(pixels.height));
  std::vector<png_bytep> rows(static_cast<size_t>(pixels.height));
  for (size_t y = 0; y < rows.size(); ++y) rows[y] = pixels.pixels.data() + y * row_bytes;
  if (!guarded_read_image(&decoder, rows.data())) WICK_FAIL(Data, name, ": corrupt PNG: ", decoder.message);
  pixels.exif = header.exif;
  return pixels;
}

}  // namespace wick::image_codecs
