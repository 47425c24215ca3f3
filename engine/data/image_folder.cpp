#include "engine/data/image_folder.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "runtime/error.h"

namespace wick {
namespace {

namespace fs = std::filesystem;

std::string lowercase(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

bool is_hidden(const fs::path& path) {
  const std::string name = path.filename().string();
  return !name.empty() && name[0] == '.';
}

bool has_image_extension(const fs::path& path, const std::vector<std::string>& extensions) {
  const std::string extension = lowercase(path.extension().string());
  for (const auto& wanted : extensions) {
    const std::string normalized = lowercase(wanted.empty() || wanted[0] == '.' ? wanted : "." + wanted);
    if (extension == normalized) return true;
  }
  return false;
}

// The relative paths of the image files under root, sorted byte by byte.
// A symlink named like an image whose target is missing or not a file is skipped with a warning (counted in
// n_skipped), so that a moved or unmounted image is not dropped unnoticed.
std::vector<std::string> list_images(const fs::path& root, const ImageFolderOptions& options,
                                     std::vector<std::string>& warnings, int64_t& n_skipped) {
  std::vector<std::string> found;
  const auto first_warning = static_cast<std::ptrdiff_t>(warnings.size());
  std::error_code error;
  const auto consider = [&](const fs::directory_entry& entry) {
    if (!has_image_extension(entry.path(), options.extensions)) return;
    std::error_code status_error;
    if (entry.is_regular_file(status_error)) {
      found.push_back(entry.path().lexically_relative(root).generic_string());
      return;
    }
    std::error_code link_error;
    if (!entry.is_symlink(link_error)) return;  // a folder named like an image, a socket...
    std::error_code target_error;
    const fs::path target = fs::read_symlink(entry.path(), target_error);
    const bool exists = fs::exists(entry.path(), target_error);
    warnings.push_back(entry.path().string() + ": a symbolic link to " + target.string() +
                       (exists ? ", which is not a file" : ", which does not exist"));
    ++n_skipped;
  };
  if (options.recursive) {
    fs::recursive_directory_iterator it(root, fs::directory_options::skip_permission_denied, error), end;
    if (error) WICK_FAIL(Data, root.string(), ": cannot list the folder (", error.message(), ")");
    while (it != end) {
      const fs::directory_entry& entry = *it;
      std::error_code type_error;
      if (is_hidden(entry.path())) {
        if (entry.is_directory(type_error)) it.disable_recursion_pending();
      } else {
        consider(entry);
      }
      it.increment(error);
      if (error) {
        warnings.push_back(root.string() + ": stopped listing part of the tree (" + error.message() + ")");
        break;
      }
    }
  } else {
    fs::directory_iterator it(root, fs::directory_options::skip_permission_denied, error), end;
    if (error) WICK_FAIL(Data, root.string(), ": cannot list the folder (", error.message(), ")");
    for (; it != end; it.increment(error)) {
      if (error) break;
      if (!is_hidden(it->path())) consider(*it);
    }
    if (error) warnings.push_back(root.string() + ": stopped listing the folder (" + error.message() + ")");
  }
  std::sort(found.begin(), found.end());
  std::sort(warnings.begin() + first_warning, warnings.end());  // the listing order is the file system's
  return found;
}

}  // namespace

ImageFolderScan scan_image_folder(const std::string& root, const ImageFolderOptions& options) {
  std::error_code error;
  WICK_CHECK_KIND(Data, fs::is_directory(root, error), root, ": not a folder (",
                  error ? error.message() : "no such folder", ")");
  ImageFolderScan scan;
  for (const std::string& relative : list_images(fs::path(root), options, scan.warnings, scan.n_skipped)) {
    ImageFolderEntry entry;
    entry.relative_path = relative;
    entry.path = (fs::path(root) / fs::path(relative)).string();
    try {
      if (options.verify) {
        const Image image = load_image(entry.path, options.decode);
        entry.header = probe_image_file(entry.path, options.decode);
        WICK_CHECK_KIND(Runtime, image.height == entry.header.height && image.width == entry.header.width,
                        entry.path, ": decoded ", image.height, "x", image.width, " but the header says ",
                        entry.header.height, "x", entry.header.width);
      } else {
        entry.header = probe_image_file(entry.path, options.decode);
      }
      entry.caption = load_caption(entry.path, options.captions);
    } catch (const WickError& failure) {
      scan.warnings.push_back(failure.what());
      ++scan.n_skipped;
      continue;
    }
    const bool captioned = std::any_of(entry.caption.texts.begin(), entry.caption.texts.end(),
                                       [](const std::string& text) { return !text.empty(); });
    if (!captioned) scan.uncaptioned.push_back(entry.relative_path);
    scan.images.push_back(std::move(entry));
  }
  return scan;
}

}  // namespace wick
