// MappedFile: mmap(2) of a whole file, private and copy-on-write.
#include "runtime/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "runtime/error.h"

namespace wick {

std::shared_ptr<MappedFile> MappedFile::open(const std::string& path) {
  std::shared_ptr<MappedFile> file(new MappedFile);
  file->path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) WICK_FAIL(Data, path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int error = errno;
    ::close(fd);
    WICK_FAIL(Data, path, ": cannot stat: ", std::strerror(error));
  }
  file->size_ = static_cast<uint64_t>(st.st_size);
  if (file->size_ == 0) {
    ::close(fd);
    return file;
  }
  void* data = ::mmap(nullptr, file->size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  int error = errno;
  ::close(fd);
  if (data == MAP_FAILED) WICK_FAIL(Data, path, ": cannot map ", file->size_, " bytes: ", std::strerror(error));
  file->data_ = static_cast<uint8_t*>(data);
  return file;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

}  // namespace wick
