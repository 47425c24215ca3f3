#include "engine/data/image_decode.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string_view>

#include "engine/data/image_codecs.h"
#include "runtime/error.h"

namespace wick {

namespace image_codecs {

void check_pixel_limit(int64_t height, int64_t width, int64_t max_pixels, const std::string& name, const char* what) {
  WICK_CHECK_KIND(Data, height > 0 && width > 0, name, ": ", what, " header gives an empty image (", width, " x ",
                  height, ")");
  if (max_pixels > 0 && height * width > max_pixels)
    WICK_FAIL(Data, name, ": ", what, " is ", width, " x ", height, " = ", height * width,
              " pixels, over the limit of ", max_pixels,
              " (a decompression bomb? if not, raise the limit: wick dataset encode --max-image-pixels)");
}

}  // namespace image_codecs

namespace {

// Larger files are refused before they are read (a 178-megapixel PNG stored raw is about 540 MB).
constexpr uint64_t max_image_file_bytes = uint64_t{1} << 30;

// Other formats, named in the error so the user knows what the file is.
std::string describe_unknown(const uint8_t* bytes, size_t size) {
  // string_view literals keep their NUL bytes ("MM\0*" is 4 bytes; strlen would stop at the NUL and match any "MM").
  using namespace std::string_view_literals;
  const auto starts = [&](std::string_view magic, size_t offset = 0) {
    return size >= offset + magic.size() && std::memcmp(bytes + offset, magic.data(), magic.size()) == 0;
  };
  if (starts("GIF87a") || starts("GIF89a")) return "a GIF file";
  if (starts("BM")) return "a BMP file";
  if (starts("II*\0"sv) || starts("MM\0*"sv)) return "a TIFF file";
  if (starts("ftypavif", 4) || starts("ftypavis", 4)) return "an AVIF file";
  if (starts("ftyphei", 4) || starts("ftypmif1", 4) || starts("ftypheix", 4)) return "a HEIF/HEIC file";
  if (starts("\xff\x0a"sv) || starts("\0\0\0\x0cJXL \x0d\x0a\x87\x0a"sv)) return "a JPEG XL file";
  std::string hex = "a file starting with";
  for (size_t i = 0; i < std::min<size_t>(size, 8); ++i) {
    char byte[4];
    std::snprintf(byte, sizeof(byte), " %02x", bytes[i]);
    hex += byte;
  }
  return hex;
}

[[noreturn]] void fail_unknown(const uint8_t* bytes, size_t size, const std::string& name) {
  if (size == 0) WICK_FAIL(Data, name, ": empty file (0 bytes), not an image");
  WICK_FAIL(Data, name, ": not a JPEG, PNG or WebP image (", describe_unknown(bytes, size), ")");
}

// RGB from 1-4 stored channels: gray replicated, alpha composited or dropped.
Image to_rgb(image_codecs::Pixels&& stored, const ImageDecodeOptions& options) {
  Image image;
  image.height = stored.height;
  image.width = stored.width;
  image.channels = 3;
  if (stored.channels == 3) {
    image.pixels = std::move(stored.pixels);
    return image;
  }
  const int64_t n = stored.height * stored.width;
  const int channels = stored.channels;
  const bool has_alpha = channels == 2 || channels == 4;
  const bool composite = has_alpha && options.alpha == AlphaMode::Composite;
  image.pixels.resize(static_cast<size_t>(n * 3));
  const uint8_t* in = stored.pixels.data();
  uint8_t* out = image.pixels.data();
  for (int64_t i = 0; i < n; ++i, in += channels, out += 3) {
    const bool gray = channels <= 2;
    for (int c = 0; c < 3; ++c) {
      const int value = in[gray ? 0 : c];
      if (!composite) {
        out[c] = static_cast<uint8_t>(value);
        continue;
      }
      // Pillow's paste with a mask: DIV255(value * a + background * (255 - a)), DIV255 rounding to nearest.
      const int alpha = in[channels - 1];
      const int sum = value * alpha + options.background[c] * (255 - alpha) + 128;
      out[c] = static_cast<uint8_t>(((sum >> 8) + sum) >> 8);
    }
  }
  return image;
}

std::vector<uint8_t> read_file(const std::string& path, const char* op) {
  std::ifstream in(path, std::ios::binary);
  WICK_CHECK_KIND(Data, in.good(), path, ": cannot open (", op, ")");
  uint8_t magic[16] = {};
  in.read(reinterpret_cast<char*>(magic), sizeof(magic));
  const auto n_magic = static_cast<size_t>(in.gcount());
  if (detect_image_format(magic, n_magic) == ImageFormat::Unknown) fail_unknown(magic, n_magic, path);
  std::error_code error;
  const auto size = std::filesystem::file_size(path, error);
  WICK_CHECK_KIND(Data, !error, path, ": cannot read its size (", op, ")");
  WICK_CHECK_KIND(Data, size <= max_image_file_bytes, path, ": ", size, " bytes, over the limit of ",
                  max_image_file_bytes, " bytes for one image file");
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  std::memcpy(bytes.data(), magic, std::min<size_t>(n_magic, bytes.size()));
  if (bytes.size() > n_magic) {
    in.read(reinterpret_cast<char*>(bytes.data() + n_magic), static_cast<std::streamsize>(bytes.size() - n_magic));
    bytes.resize(n_magic + static_cast<size_t>(in.gcount()));
  }
  return bytes;
}

}  // namespace

const char* image_format_name(ImageFormat format) {
  switch (format) {
    case ImageFormat::Jpeg: return "jpeg";
    case ImageFormat::Png: return "png";
    case ImageFormat::Webp: return "webp";
    case ImageFormat::Unknown: break;
  }
  return "unknown";
}

ImageFormat detect_image_format(const uint8_t* bytes, size_t size) {
  if (size >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF) return ImageFormat::Jpeg;
  static const uint8_t png_signature[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  if (size >= 8 && std::memcmp(bytes, png_signature, 8) == 0) return ImageFormat::Png;
  if (size >= 12 && std::memcmp(bytes, "RIFF", 4) == 0 && std::memcmp(bytes + 8, "WEBP", 4) == 0)
    return ImageFormat::Webp;
  return ImageFormat::Unknown;
}

ImageHeader probe_image(const std::vector<uint8_t>& bytes, const ImageDecodeOptions& options, const std::string& name) {
  const ImageFormat format = detect_image_format(bytes.data(), bytes.size());
  image_codecs::Header stored;
  switch (format) {
    case ImageFormat::Jpeg: stored = image_codecs::read_jpeg_header(bytes.data(), bytes.size(), name); break;
    case ImageFormat::Png: stored = image_codecs::read_png_header(bytes.data(), bytes.size(), name); break;
    case ImageFormat::Webp: stored = image_codecs::read_webp_header(bytes.data(), bytes.size(), name); break;
    case ImageFormat::Unknown: fail_unknown(bytes.data(), bytes.size(), name);
  }
  image_codecs::check_pixel_limit(stored.height, stored.width, options.max_pixels, name, image_format_name(format));
  ImageHeader header;
  header.format = format;
  header.stored_height = stored.height;
  header.stored_width = stored.width;
  header.orientation = image_codecs::exif_orientation(stored.exif);
  const bool swapped = options.apply_orientation && header.orientation >= 5;
  header.height = swapped ? stored.width : stored.height;
  header.width = swapped ? stored.height : stored.width;
  header.has_alpha = stored.has_alpha;
  header.color = stored.color;
  return header;
}

Image decode_image(const std::vector<uint8_t>& bytes, const ImageDecodeOptions& options, const std::string& name) {
  WICK_CHECK(options.max_pixels >= 0, "decode_image: max_pixels must be >= 0 (0 = no limit), got ",
             options.max_pixels);
  const ImageFormat format = detect_image_format(bytes.data(), bytes.size());
  image_codecs::Pixels stored;
  switch (format) {
    case ImageFormat::Jpeg:
      stored = image_codecs::decode_jpeg(bytes.data(), bytes.size(), name, options.max_pixels);
      break;
    case ImageFormat::Png:
      stored = image_codecs::decode_png(bytes.data(), bytes.size(), name, options.max_pixels);
      break;
    case ImageFormat::Webp:
      stored = image_codecs::decode_webp(bytes.data(), bytes.size(), name, options.max_pixels);
      break;
    case ImageFormat::Unknown: fail_unknown(bytes.data(), bytes.size(), name);
  }
  const int orientation = options.apply_orientation ? image_codecs::exif_orientation(stored.exif) : 1;
  Image image = to_rgb(std::move(stored), options);
  return orientation == 1 ? image : apply_exif_orientation(image, orientation);
}

Image load_image(const std::string& path, const ImageDecodeOptions& options) {
  return decode_image(read_file(path, "load_image"), options, path);
}

ImageHeader probe_image_file(const std::string& path, const ImageDecodeOptions& options) {
  return probe_image(read_file(path, "probe_image_file"), options, path);
}

Image apply_exif_orientation(const Image& image, int orientation) {
  WICK_CHECK(orientation >= 1 && orientation <= 8, "apply_exif_orientation: orientation must be 1-8, got ",
             orientation);
  WICK_CHECK(static_cast<int64_t>(image.pixels.size()) == image.height * image.width * image.channels,
             "apply_exif_orientation: a ", image.height, "x", image.width, "x", image.channels, " image holds ",
             image.pixels.size(), " bytes");
  if (orientation == 1) return image;
  const int64_t h = image.height, w = image.width, c = image.channels;
  const bool swapped = orientation >= 5;
  Image out;
  out.height = swapped ? w : h;
  out.width = swapped ? h : w;
  out.channels = c;
  out.pixels.resize(image.pixels.size());
  for (int64_t y = 0; y < out.height; ++y)
    for (int64_t x = 0; x < out.width; ++x) {
      int64_t sy = y, sx = x;  // the stored pixel shown at (y, x)
      switch (orientation) {
        case 2: sx = w - 1 - x; break;
        case 3: sy = h - 1 - y, sx = w - 1 - x; break;
        case 4: sy = h - 1 - y; break;
        case 5: sy = x, sx = y; break;
        case 6: sy = h - 1 - x, sx = y; break;
        case 7: sy = h - 1 - x, sx = w - 1 - y; break;
        case 8: sy = x, sx = w - 1 - y; break;
        default: break;
      }
      std::memcpy(&out.pixels[static_cast<size_t>((y * out.width + x) * c)],
                  &image.pixels[static_cast<size_t>((sy * w + sx) * c)], static_cast<size_t>(c));
    }
  return out;
}

Tensor image_to_tensor(const Image& image) {
  WICK_CHECK(image.channels >= 1 && image.height > 0 && image.width > 0 &&
                 static_cast<int64_t>(image.pixels.size()) == image.height * image.width * image.channels,
             "image_to_tensor: expected a non-empty HWC u8 image, got ", image.height, "x", image.width, "x",
             image.channels, " holding ", image.pixels.size(), " bytes");
  const int64_t c = image.channels, h = image.height, w = image.width;
  Tensor out = Tensor::empty({c, h, w}, DType::F32);
  float* dst = out.data_as<float>();
  for (int64_t k = 0; k < c; ++k)
    for (int64_t i = 0; i < h * w; ++i) {
      const float unit = static_cast<float>(image.pixels[static_cast<size_t>(i * c + k)]) / 255.0f;
      dst[k * h * w + i] = (unit - 0.5f) / 0.5f;
    }
  return out;
}

}  // namespace wick
