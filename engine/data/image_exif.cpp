// The EXIF Orientation tag through libexif (Debian libexif-dev), for all three containers: JPEG's APP1
// segment ("Exif\0\0" + TIFF), PNG's eXIf chunk and WebP's EXIF chunk (TIFF, sometimes with the prefix).
#include <libexif/exif-data.h>

#include <cstring>

#include "engine/data/image_codecs.h"

namespace wick::image_codecs {

int exif_orientation(const std::vector<uint8_t>& exif) {
  static const uint8_t exif_prefix[6] = {'E', 'x', 'i', 'f', 0, 0};
  if (exif.size() < 8 || exif.size() > 0xFFFFFFFFu) return 1;
  std::vector<uint8_t> block;
  const uint8_t* data = exif.data();
  size_t size = exif.size();
  if (std::memcmp(data, exif_prefix, 6) != 0) {
    // libexif wants the prefix; a bare TIFF block starts "II*\0" or "MM\0*".
    const bool tiff = std::memcmp(data, "II*\0", 4) == 0 || std::memcmp(data, "MM\0*", 4) == 0;
    if (!tiff) return 1;
    block.reserve(size + 6);
    block.insert(block.end(), exif_prefix, exif_prefix + 6);
    block.insert(block.end(), exif.begin(), exif.end());
    data = block.data();
    size = block.size();
  }
  ExifData* parsed = exif_data_new();
  if (parsed == nullptr) return 1;
  // Read the tags as they are: no "fixing" (adding mandatory tags with default values).
  exif_data_unset_option(parsed, EXIF_DATA_OPTION_FOLLOW_SPECIFICATION);
  exif_data_load_data(parsed, data, static_cast<unsigned int>(size));
  int orientation = 1;
  ExifEntry* entry = exif_content_get_entry(parsed->ifd[EXIF_IFD_0], EXIF_TAG_ORIENTATION);
  if (entry != nullptr && entry->format == EXIF_FORMAT_SHORT && entry->components >= 1 && entry->data != nullptr &&
      entry->size >= 2)
    orientation = exif_get_short(entry->data, exif_data_get_byte_order(parsed));
  exif_data_unref(parsed);
  return orientation >= 1 && orientation <= 8 ? orientation : 1;
}

}  // namespace wick::image_codecs
