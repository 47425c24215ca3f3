// The training images of a folder tree, in a fixed order, with their sizes and captions
// (docs/dataset.md "Images and captions"). A file that cannot be read becomes a warning, never an abort.
//
//   ImageFolderScan scan = scan_image_folder("photos", {.captions = {.trigger_word = "ohwx"}});
//   for (const ImageFolderEntry& e : scan.images)      // sorted by relative path
//     use(e.path, e.header.height, e.header.width, e.caption.texts);
//   for (const std::string& w : scan.warnings) log(w); // one per skipped file (scan.n_skipped)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/data/captions.h"
#include "engine/data/image_decode.h"

namespace wick {

struct ImageFolderOptions {
  std::vector<std::string> extensions = {".jpg", ".jpeg", ".png", ".webp"};  // case-insensitive
  bool recursive = true;
  ImageDecodeOptions decode;  // max_pixels, orientation: the header probe applies them
  CaptionOptions captions;
  bool verify = false;        // decode every image in full (finds truncated pixel data), not only its header
};

struct ImageFolderEntry {
  std::string path;           // root joined with relative_path
  std::string relative_path;  // '/'-separated, from the root
  ImageHeader header;         // height and width as decoded (after the EXIF orientation)
  Caption caption;
};

struct ImageFolderScan {
  std::vector<ImageFolderEntry> images;  // sorted by relative_path, byte by byte
  std::vector<std::string> warnings;     // "<path>: <reason>", one per skipped image or unreadable folder
  int64_t n_skipped = 0;                 // images left out (unreadable image or caption, dangling symlink)
  std::vector<std::string> uncaptioned;  // relative paths of kept images whose every caption is empty (no sidecar or
                                         // a blank one, and no default caption or trigger word to stand in)
};

// Walks `root` (recursively unless told otherwise), skipping hidden files and folders (names starting
// with '.') and files without an image extension; folder symlinks are not followed. A symlink with an image
// extension whose target is missing (or not a file) is a skipped image with a warning naming it. Every image's
// header is probed and its caption read. WickError (Data) only when `root` is not a readable folder.
ImageFolderScan scan_image_folder(const std::string& root, const ImageFolderOptions& options = {});

}  // namespace wick
