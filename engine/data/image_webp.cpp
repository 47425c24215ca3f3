// WebP through libwebp (Debian libwebp-dev): the advanced decoding API for a status on failure, and
// libwebpdemux for the EXIF chunk of extended (VP8X) files. libwebp reports errors by return value.
#include <webp/decode.h>
#include <webp/demux.h>

#include "engine/data/image_codecs.h"
#include "runtime/error.h"

namespace wick::image_codecs {
namespace {

const char* status_name(VP8StatusCode status) {
  switch (status) {
    case VP8_STATUS_OK: return "ok";
    case VP8_STATUS_OUT_OF_MEMORY: return "out of memory";
    case VP8_STATUS_INVALID_PARAM: return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR: return "corrupt bitstream";
    case VP8_STATUS_UNSUPPORTED_FEATURE: return "unsupported feature";
    case VP8_STATUS_SUSPENDED: return "suspended";
    case VP8_STATUS_USER_ABORT: return "aborted";
    case VP8_STATUS_NOT_ENOUGH_DATA: return "truncated (not enough data)";
  }
  return "unknown status";
}

WebPBitstreamFeatures features_of(const uint8_t* bytes, size_t size, const std::string& name) {
  WebPBitstreamFeatures features;
  const VP8StatusCode status = WebPGetFeatures(bytes, size, &features);
  WICK_CHECK_KIND(Data, status == VP8_STATUS_OK, name, ": not a readable WebP: ", status_name(status));
  WICK_CHECK_KIND(Data, !features.has_animation, name,
                  ": animated WebP is not supported (save one frame as a still image)");
  return features;
}

std::vector<uint8_t> exif_of(const uint8_t* bytes, size_t size) {
  std::vector<uint8_t> exif;
  const WebPData data = {bytes, size};
  WebPDemuxer* demuxer = WebPDemux(&data);
  if (demuxer == nullptr) return exif;
  if ((WebPDemuxGetI(demuxer, WEBP_FF_FORMAT_FLAGS) & EXIF_FLAG) != 0) {
    WebPChunkIterator chunk;
    if (WebPDemuxGetChunk(demuxer, "EXIF", 1, &chunk)) {
      exif.assign(chunk.chunk.bytes, chunk.chunk.bytes + chunk.chunk.size);
      WebPDemuxReleaseChunkIterator(&chunk);
    }
  }
  WebPDemuxDelete(demuxer);
  return exif;
}

const char* color_name(const WebPBitstreamFeatures& features) {
  const bool lossless = features.format == 2;
  if (features.has_alpha) return lossless ? "rgba (lossless)" : "rgba (lossy)";
  return lossless ? "rgb (lossless)" : "rgb (lossy)";
}

}  // namespace

Header read_webp_header(const uint8_t* bytes, size_t size, const std::string& name) {
  const WebPBitstreamFeatures features = features_of(bytes, size, name);
  Header header;
  header.height = features.height;
  header.width = features.width;
  header.has_alpha = features.has_alpha != 0;
  header.color = color_name(features);
  header.exif = exif_of(bytes, size);
  return header;
}

Pixels decode_webp(const uint8_t* bytes, size_t size, const std::string& name, int64_t max_pixels) {
  const WebPBitstreamFeatures features = features_of(bytes, size, name);
  check_pixel_limit(features.height, features.width, max_pixels, name, "WebP");
  Pixels pixels;
  pixels.height = features.height;
  pixels.width = features.width;
  pixels.channels = features.has_alpha ? 4 : 3;
  pixels.pixels.resize(static_cast<size_t>(pixels.height * pixels.width * pixels.channels));

  WebPDecoderConfig config;
  WICK_CHECK_KIND(Runtime, WebPInitDecoderConfig(&config), name, ": libwebp: version mismatch");
  config.output.colorspace = features.has_alpha ? MODE_RGBA : MODE_RGB;  // not premultiplied
  config.output.is_external_memory = 1;
  config.output.width = features.width;
  config.output.height = features.height;
  config.output.u.RGBA.rgba = pixels.pixels.data();
  config.output.u.RGBA.stride = static_cast<int>(pixels.width * pixels.channels);
  config.output.u.RGBA.size = pixels.pixels.size();
  const VP8StatusCode status = WebPDecode(bytes, size, &config);
  WebPFreeDecBuffer(&config.output);  // frees nothing of ours (external memory), only internal state
  WICK_CHECK_KIND(Data, status == VP8_STATUS_OK, name, ": corrupt WebP: ", status_name(status));
  pixels.exif = exif_of(bytes, size);
  return pixels;
}

}  // namespace wick::image_codecs
