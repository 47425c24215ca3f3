// Replacing a file so that readers (and a crash) see the old file or the whole new one, never a part,
// and so that a failed write (full disk, I/O error, file size limit) is reported and leaves nothing.
//
//   write_file_atomically("output/run/config.yaml", text);    // bytes in memory
//
//   AtomicFile file("output/run/lora/run.safetensors");        // streamed: <path>.tmp-<pid>
//   file.write(header.data(), header.size());  ...            // buffered; throws on the first failure
//   file.commit();                                             // fsync, rename over <path>, fsync the folder
//   // destroyed without commit() (an exception): the temporary is removed
//
//   fs::path tmp = atomic_temporary_path(out);                 // a file another library writes (HDF5)
//   ... write tmp ...  replace_file(tmp, out);                 // fsync, rename, fsync the folder
//
// Every error is a WickError (Data) naming the file and the system's reason ("No space left on
// device", "Input/output error", "File too large"); the temporary is removed before it is thrown.
// Append-only streams (metrics.jsonl, TensorBoard events) use write_all on their own descriptor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace wick {

// <path>.tmp-<pid>: the temporary a writer of this process uses for `path`.
std::filesystem::path atomic_temporary_path(const std::filesystem::path& path);

class AtomicFile {
 public:
  // Creates (truncates) <path>.tmp-<pid>, mode 0644. Throws WickError (Data) naming it when it cannot.
  explicit AtomicFile(std::filesystem::path path);
  // Not committed: closes and removes the temporary. Never throws.
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Appends bytes (buffered up to 1 MiB; larger writes go straight through). On failure the
  // temporary is removed and WickError (Data) names `path` and the reason; later calls throw too.
  void write(const void* data, size_t n_bytes);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // Flushes and fsyncs the temporary (commit() does it when not done). Failure: as write().
  void sync();
  // Flushes, fsyncs, closes, renames the temporary over `path` and fsyncs the folder. A failure
  // removes the temporary (the old `path`, if any, is untouched unless the rename happened).
  void commit();

  const std::filesystem::path& path() const { return path_; }
  const std::filesystem::path& temporary_path() const { return temporary_; }
  uint64_t bytes_written() const { return n_written_ + buffer_.size(); }

 private:
  void flush();
  [[noreturn]] void fail(const char* what, int error);

  std::filesystem::path path_, temporary_;
  int fd_ = -1;
  bool committed_ = false, synced_ = false;
  uint64_t n_written_ = 0;
  std::vector<char> buffer_;
};

// AtomicFile in one call.
void write_file_atomically(const std::filesystem::path& path, std::string_view bytes);

// For a file written by other means (another library) under `temporary`: fsyncs it, renames it over
// `path` and fsyncs the folder. On failure removes `temporary` and throws WickError (Data).
void replace_file(const std::filesystem::path& temporary, const std::filesystem::path& path);

// fsync of a directory (after a rename or an unlink in it). Throws WickError (Data) naming it.
void fsync_directory(const std::filesystem::path& directory);

// write(2) until every byte is written (EINTR retried). Throws WickError (Data) "<what> <path>: <reason>"
// on failure; `path` only names the file in the message.
void write_all(int fd, const void* data, size_t n_bytes, const std::string& path, const char* what = "cannot write");

}  // namespace wick
