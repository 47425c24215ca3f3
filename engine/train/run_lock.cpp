#include "engine/train/run_lock.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <thread>
#include <utility>

#include "runtime/error.h"

namespace wick {
namespace {

namespace fs = std::filesystem;

// Tries the exclusive lock on the whole file: true when taken, false when another open file description holds it.
bool try_lock(int fd, const fs::path& path) {
  struct flock lock;
  std::memset(&lock, 0, sizeof lock);
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;  // l_start 0, l_len 0: the whole file, however long
  if (::fcntl(fd, F_OFD_SETLK, &lock) == 0) return true;
  if (errno == EACCES || errno == EAGAIN) return false;
  WICK_FAIL(Config, path.string(), ": cannot lock the run directory (", std::strerror(errno),
            "; a file system without record locks? output_dir must support fcntl locks)");
}

std::string read_holder(const fs::path& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return "unknown";
  char text[512] = {};
  const size_t n = std::fread(text, 1, sizeof text - 1, f);
  std::fclose(f);
  std::string holder(text, n);
  while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
  return holder.empty() ? "a process that has not written its name yet" : holder;
}

std::string this_process() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return "host " + std::string(host) + ", pid " + std::to_string(::getpid()) + ", since " + when;
}

std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", seconds);
  return text;
}

}  // namespace

fs::path run_lock_path(const fs::path& run_dir) { return run_dir / ".wick.lock"; }

RunLock RunLock::acquire(const fs::path& run_dir, const RunLockOptions& options) {
  const fs::path path = run_lock_path(run_dir);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  WICK_CHECK_KIND(Config, fd >= 0, path.string(), ": cannot create the run directory's lock file (",
                  std::strerror(errno), ")");
  const auto started = std::chrono::steady_clock::now();
  bool announced = false;
  try {
    while (!try_lock(fd, path)) {
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      if (waited >= options.wait_s)
        WICK_FAIL(Config, "another job is training in ", run_dir.string(), " (", read_holder(path),
                  options.wait_s > 0 ? "; waited " + seconds_text(options.wait_s) + " s" : "",
                  "): one job per run directory; wait for it to end or stop it, or train under another name");
      if (options.announce && !announced) {
        std::fprintf(stderr, "wick train: %s is locked by another job (%s); waiting up to %.0f s for it to end\n",
                     run_dir.c_str(), read_holder(path).c_str(), options.wait_s);
        announced = true;
      }
      std::this_thread::sleep_for(std::chrono::duration<double>(options.poll_s));
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  // The name is for the messages only: without it the lock still holds (a refused job then says it has none).
  std::string holder = this_process();
  const std::string line = holder + "\n";
  const bool named = ::ftruncate(fd, 0) == 0 &&
                     ::pwrite(fd, line.data(), line.size(), 0) == static_cast<ssize_t>(line.size());
  if (!named) holder += " (its name not written to " + path.string() + ")";
  return RunLock(fd, std::move(holder));
}

RunLock::RunLock(RunLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)), holder_(std::move(other.holder_)) {}

RunLock& RunLock::operator=(RunLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    holder_ = std::move(other.holder_);
  }
  return *this;
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor of the description releases its OFD lock
}

}  // namespace wick
