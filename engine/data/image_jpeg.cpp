// JPEG through libjpeg-turbo's libjpeg API (Debian libjpeg62-turbo-dev).
//
// libjpeg reports a fatal error by calling error_exit, which must not return: it longjmps back to a
// setjmp. Every libjpeg call that can fail runs in one of the guarded_* functions below, which set the
// jump point themselves and hold only trivially destructible locals, so the longjmp skips no destructor
// and lands in a frame that is still live. The decoder state is owned by JpegDecoder, whose destructor
// calls jpeg_destroy_decompress (which never fails).
#include <csetjmp>
#include <cstdio>
#include <cstring>

// jpeglib.h needs size_t and FILE declared first.
#include <jpeglib.h>
#include <jerror.h>

#include "engine/data/image_codecs.h"
#include "runtime/error.h"

namespace wick::image_codecs {
namespace {

// A progressive file may hold any number of scans; each one rereads the whole image. TurboJPEG stops
// at 500 (its TJPARAM_SCANLIMIT, the value its tools use against such denial-of-service files).
constexpr int max_jpeg_scans = 500;

struct JpegErrors {
  jpeg_error_mgr manager;  // first: libjpeg passes &manager back as cinfo->err
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool truncated;
};

struct JpegDecoder {
  jpeg_decompress_struct info;
  JpegErrors errors;
  jpeg_progress_mgr progress;
  bool created = false;

  JpegDecoder() {
    std::memset(&info, 0, sizeof(info));
    std::memset(&errors, 0, sizeof(errors));
    std::memset(&progress, 0, sizeof(progress));
  }
  ~JpegDecoder() {
    if (created) jpeg_destroy_decompress(&info);
  }
  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;
};

void on_error_exit(j_common_ptr cinfo) {
  auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, errors->message);
  std::longjmp(errors->jump, 1);
}

// Warnings (level -1) are corrupt-data notices that libjpeg recovers from, as Pillow and browsers do;
// running out of data is not recovered from (libjpeg would pad the image with gray).
void on_emit_message(j_common_ptr cinfo, int level) {
  if (level >= 0) return;  // trace messages
  auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
  cinfo->err->num_warnings++;
  if (cinfo->err->msg_code == JWRN_JPEG_EOF) errors->truncated = true;
}

void on_progress(j_common_ptr cinfo) {
  if (!cinfo->is_decompressor) return;
  auto* info = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (info->input_scan_number > max_jpeg_scans) {
    auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
    std::snprintf(errors->message, sizeof(errors->message), "more than %d progressive scans (refused)",
                  max_jpeg_scans);
    std::longjmp(errors->jump, 1);
  }
}

// ---- guarded libjpeg calls (no destructible locals below a setjmp) ----

bool guarded_create(JpegDecoder* decoder) {
  decoder->info.err = jpeg_std_error(&decoder->errors.manager);
  decoder->errors.manager.error_exit = on_error_exit;
  decoder->errors.manager.emit_message = on_emit_message;
  decoder->created = true;  // jpeg_destroy_decompress copes with a half-created struct (mem == NULL)
  if (setjmp(decoder->errors.jump)) return false;
  jpeg_create_decompress(&decoder->info);
  decoder->progress.progress_monitor = on_progress;
  decoder->info.progress = &decoder->progress;
  return true;
}

bool guarded_read_header(JpegDecoder* decoder, const uint8_t* bytes, size_t size) {
  if (setjmp(decoder->errors.jump)) return false;
  jpeg_mem_src(&decoder->info, bytes, static_cast<unsigned long>(size));
  jpeg_save_markers(&decoder->info, JPEG_APP0 + 1, 0xFFFF);
  jpeg_read_header(&decoder->info, TRUE);
  return true;
}

bool guarded_output_dimensions(JpegDecoder* decoder, J_COLOR_SPACE out_space) {
  if (setjmp(decoder->errors.jump)) return false;
  decoder->info.out_color_space = out_space;
  jpeg_calc_output_dimensions(&decoder->info);
  return true;
}

bool guarded_decompress(JpegDecoder* decoder, uint8_t* out, size_t row_bytes) {
  if (setjmp(decoder->errors.jump)) return false;
  jpeg_start_decompress(&decoder->info);
  while (decoder->info.output_scanline < decoder->info.output_height) {
    JSAMPROW row = out + static_cast<size_t>(decoder->info.output_scanline) * row_bytes;
    if (jpeg_read_scanlines(&decoder->info, &row, 1) != 1) break;  // suspension cannot happen from memory
  }
  jpeg_finish_decompress(&decoder->info);
  return true;
}

// ---- C++ side ----

[[noreturn]] void fail(const JpegDecoder& decoder, const std::string& name) {
  WICK_FAIL(Data, name, ": not a readable JPEG: ", decoder.errors.message,
            decoder.errors.truncated ? " (the file is truncated)" : "");
}

const char* color_name(J_COLOR_SPACE space) {
  switch (space) {
    case JCS_GRAYSCALE: return "gray";
    case JCS_YCbCr: return "ycbcr";
    case JCS_RGB: return "rgb";
    case JCS_CMYK: return "cmyk";
    case JCS_YCCK: return "ycck";
    default: return "unknown";
  }
}

// The first APP1 segment that starts with "Exif\0\0".
std::vector<uint8_t> exif_of(const jpeg_decompress_struct& info) {
  for (jpeg_saved_marker_ptr marker = info.marker_list; marker != nullptr; marker = marker->next) {
    if (marker->marker == JPEG_APP0 + 1 && marker->data_length >= 6 &&
        std::memcmp(marker->data, "Exif\0\0", 6) == 0)
      return std::vector<uint8_t>(marker->data, marker->data + marker->data_length);
  }
  return {};
}

void open_header(JpegDecoder& decoder, const uint8_t* bytes, size_t size, const std::string& name) {
  if (!guarded_create(&decoder)) fail(decoder, name);
  if (!guarded_read_header(&decoder, bytes, size)) fail(decoder, name);
  if (decoder.errors.truncated) WICK_FAIL(Data, name, ": truncated JPEG (the file ends inside the header)");
}

}  // namespace

Header read_jpeg_header(const uint8_t* bytes, size_t size, const std::string& name) {
  JpegDecoder decoder;
  open_header(decoder, bytes, size, name);
  Header header;
  header.height = decoder.info.image_height;
  header.width = decoder.info.image_width;
  header.color = color_name(decoder.info.jpeg_color_space);
  header.exif = exif_of(decoder.info);
  return header;
}

Pixels decode_jpeg(const uint8_t* bytes, size_t size, const std::string& name, int64_t max_pixels) {
  JpegDecoder decoder;
  open_header(decoder, bytes, size, name);
  const J_COLOR_SPACE stored = decoder.info.jpeg_color_space;
  check_pixel_limit(decoder.info.image_height, decoder.info.image_width, max_pixels, name, "JPEG");

  J_COLOR_SPACE out_space;
  switch (stored) {
    case JCS_GRAYSCALE: out_space = JCS_GRAYSCALE; break;
    case JCS_YCbCr:
    case JCS_RGB: out_space = JCS_RGB; break;
    case JCS_CMYK:
    case JCS_YCCK: out_space = JCS_CMYK; break;  // libjpeg turns YCCK into (inverted) CMYK
    default:
      WICK_FAIL(Data, name, ": unsupported JPEG colour space (", decoder.info.num_components, " components)");
  }
  if (!guarded_output_dimensions(&decoder, out_space)) fail(decoder, name);

  // The saved markers live in libjpeg's per-image pool, which jpeg_finish_decompress frees.
  std::vector<uint8_t> exif = exif_of(decoder.info);
  const int64_t height = decoder.info.output_height, width = decoder.info.output_width;
  const int components = decoder.info.output_components;
  std::vector<uint8_t> samples(static_cast<size_t>(height * width * components));
  if (!guarded_decompress(&decoder, samples.data(), static_cast<size_t>(width * components))) fail(decoder, name);
  if (decoder.errors.truncated)
    WICK_FAIL(Data, name, ": truncated JPEG (premature end of the data after ", size, " bytes)");

  Pixels pixels;
  pixels.height = height;
  pixels.width = width;
  pixels.exif = std::move(exif);
  if (components != 4) {
    pixels.channels = components;
    pixels.pixels = std::move(samples);
    return pixels;
  }
  // CMYK as Adobe stores it (inverted: 255 = no ink), which is how Pillow reads every CMYK JPEG
  // ("CMYK;I"), then Pillow's cmyk2rgb: r = (255 - k) - round((c * (255 - k)) / 255), c = 255 - stored.
  pixels.channels = 3;
  pixels.pixels.resize(static_cast<size_t>(height * width * 3));
  const auto muldiv255 = [](int a, int b) {
    const int t = a * b + 128;
    return ((t >> 8) + t) >> 8;
  };
  for (int64_t i = 0; i < height * width; ++i) {
    const uint8_t* in = &samples[static_cast<size_t>(i * 4)];
    const int not_k = in[3];  // 255 - k with k = 255 - stored
    for (int c = 0; c < 3; ++c) {
      const int value = not_k - muldiv255(255 - in[c], not_k);
      pixels.pixels[static_cast<size_t>(i * 3 + c)] = static_cast<uint8_t>(value < 0 ? 0 : value);
    }
  }
  return pixels;
}

}  // namespace wick::image_codecs
