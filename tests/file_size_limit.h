// Simulated full disk for tests: lowers RLIMIT_FSIZE (the largest file this process may write) for a
// scope, with SIGXFSZ ignored, so a write past the limit fails with EFBIG ("File too large") the way
// a write to a full disk fails with ENOSPC. Restores both when it goes out of scope.
//
//   {
//     FileSizeLimit limit(4096);
//     EXPECT_THROW(save_safetensors(path, big_tensors), WickError);
//   }
#pragma once

#include <sys/resource.h>

#include <csignal>
#include <cstdint>

namespace wick::testing {

class FileSizeLimit {
 public:
  explicit FileSizeLimit(uint64_t max_bytes) {
    ::getrlimit(RLIMIT_FSIZE, &saved_);
    previous_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit lowered = saved_;
    lowered.rlim_cur = static_cast<rlim_t>(max_bytes);
    ::setrlimit(RLIMIT_FSIZE, &lowered);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, previous_handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit saved_{};
  void (*previous_handler_)(int) = SIG_DFL;
};

}  // namespace wick::testing
