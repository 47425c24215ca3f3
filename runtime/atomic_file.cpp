// Files replaced atomically (temporary, fsync, rename, fsync of the folder), and write(2) until done.
#include "runtime/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "runtime/error.h"

namespace fs = std::filesystem;

namespace wick {
namespace {

constexpr size_t kBufferBytes = size_t{1} << 20;

fs::path folder_of(const fs::path& path) { return path.has_parent_path() ? path.parent_path() : fs::path("."); }

// write(2) until every byte is written; 0, or the errno of the failure.
int write_fully(int fd, const void* data, size_t n_bytes) {
  const char* bytes = static_cast<const char*>(data);
  size_t done = 0;
  while (done < n_bytes) {
    const ssize_t n = ::write(fd, bytes + done, n_bytes - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EIO;
    done += static_cast<size_t>(n);
  }
  return 0;
}

}  // namespace

fs::path atomic_temporary_path(const fs::path& path) {
  return fs::path(path.string() + ".tmp-" + std::to_string(::getpid()));
}

void write_all(int fd, const void* data, size_t n_bytes, const std::string& path, const char* what) {
  if (const int error = write_fully(fd, data, n_bytes)) WICK_FAIL(Data, what, " ", path, ": ", std::strerror(error));
}

void fsync_directory(const fs::path& directory) {
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    WICK_FAIL(Data, "cannot open the folder ", directory.string(), " to sync it: ", std::strerror(error));
  }
  const int status = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (status != 0) WICK_FAIL(Data, "cannot sync the folder ", directory.string(), ": ", std::strerror(error));
}

AtomicFile::AtomicFile(fs::path path) : path_(std::move(path)), temporary_(atomic_temporary_path(path_)) {
  fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    const int error = errno;
    WICK_FAIL(Data, "cannot create ", temporary_.string(), " (to replace ", path_.string(), "): ", std::strerror(error));
  }
  buffer_.reserve(kBufferBytes);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temporary_.c_str());
}

void AtomicFile::fail(const char* what, int error) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(temporary_.c_str());
  buffer_.clear();
  WICK_FAIL(Data, what, " ", temporary_.string(), ": ", std::strerror(error), " (", path_.string(),
            " was not replaced; the temporary is removed)");
}

void AtomicFile::flush() {
  if (buffer_.empty()) return;
  if (const int error = write_fully(fd_, buffer_.data(), buffer_.size())) fail("cannot write", error);
  n_written_ += buffer_.size();
  buffer_.clear();
}

void AtomicFile::write(const void* data, size_t n_bytes) {
  WICK_CHECK(!committed_, "AtomicFile: ", path_.string(), " was already committed");
  WICK_CHECK_KIND(Data, fd_ >= 0, "cannot write ", path_.string(), ": an earlier write to it failed");
  synced_ = false;
  if (buffer_.size() + n_bytes <= kBufferBytes) {
    const char* bytes = static_cast<const char*>(data);
    buffer_.insert(buffer_.end(), bytes, bytes + n_bytes);
    return;
  }
  flush();
  if (const int error = write_fully(fd_, data, n_bytes)) fail("cannot write", error);
  n_written_ += n_bytes;
}

void AtomicFile::sync() {
  WICK_CHECK(!committed_, "AtomicFile: ", path_.string(), " was already committed");
  WICK_CHECK_KIND(Data, fd_ >= 0, "cannot write ", path_.string(), ": an earlier write to it failed");
  flush();
  if (::fsync(fd_) != 0) fail("cannot sync", errno);
  synced_ = true;
}

void AtomicFile::commit() {
  WICK_CHECK(!committed_, "AtomicFile: ", path_.string(), " was already committed");
  WICK_CHECK_KIND(Data, fd_ >= 0, "cannot write ", path_.string(), ": an earlier write to it failed");
  if (!synced_ || !buffer_.empty()) sync();
  const int status = ::close(fd_);
  fd_ = -1;
  if (status != 0) fail("cannot close", errno);
  if (::rename(temporary_.c_str(), path_.c_str()) != 0) {
    const int error = errno;
    ::unlink(temporary_.c_str());
    WICK_FAIL(Data, "cannot rename ", temporary_.string(), " to ", path_.string(), ": ", std::strerror(error),
              " (the temporary is removed)");
  }
  committed_ = true;
  fsync_directory(folder_of(path_));
}

void write_file_atomically(const fs::path& path, std::string_view bytes) {
  AtomicFile file(path);
  file.write(bytes);
  file.commit();
}

void replace_file(const fs::path& temporary, const fs::path& path) {
  auto fail = [&](const char* what, int error) {
    ::unlink(temporary.c_str());
    WICK_FAIL(Data, what, " ", temporary.string(), ": ", std::strerror(error), " (", path.string(),
              " was not replaced; the temporary is removed)");
  };
  const int fd = ::open(temporary.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open", errno);
  const int status = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (status != 0) fail("cannot sync", error);
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    const int rename_error = errno;
    ::unlink(temporary.c_str());
    WICK_FAIL(Data, "cannot rename ", temporary.string(), " to ", path.string(), ": ", std::strerror(rename_error),
              " (the temporary is removed)");
  }
  fsync_directory(folder_of(path));
}

}  // namespace wick
