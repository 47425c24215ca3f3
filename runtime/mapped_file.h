// A whole file mapped into memory, private and copy-on-write: the bytes are read from the disk on
// first touch, and writing through the mapping changes memory, never the file.
//
//   std::shared_ptr<MappedFile> file = MappedFile::open("step_00000100/model.safetensors");
//   Sha256 digest; digest.update(file->data(), file->size());
//   SafetensorsFile st = SafetensorsFile::open(file);   // the same bytes, no second read
//
// Shared ownership: tensors that view the mapping (SafetensorsFile::get) keep it alive.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace wick {

class MappedFile {
 public:
  // Maps `path` (MAP_PRIVATE, readable and writable). An empty file maps to no memory (data() is
  // null, size() 0). Throws WickError (Data) naming the file when it cannot be opened or mapped.
  static std::shared_ptr<MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  MappedFile() = default;
  std::string path_;
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace wick
