// run_in_child (engine/data/child_check.h): fork, limits, a pipe for the child's verdict, poll with a
// deadline, SIGKILL at the deadline.
#include "engine/data/child_check.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string_view>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

namespace wick {
namespace {

// Virtual size of this process in bytes (/proc/self/statm, first field in pages); 0 if unreadable.
int64_t address_space_bytes() {
  std::FILE* statm = std::fopen("/proc/self/statm", "r");
  if (statm == nullptr) return 0;
  unsigned long long pages = 0;
  const int read = std::fscanf(statm, "%llu", &pages);
  std::fclose(statm);
  return read == 1 ? static_cast<int64_t>(pages) * ::sysconf(_SC_PAGESIZE) : 0;
}

// Child side: writes one record "<tag><kind>\n<message>" and nothing else.
void report(int fd, char tag, int kind, const std::string& message) {
  std::string record(1, tag);
  record += std::to_string(kind) + "\n" + message;
  const char* data = record.data();
  size_t left = record.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, data, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data += n;
    left -= static_cast<size_t>(n);
  }
}

#if defined(__SANITIZE_ADDRESS__)
int asan_report_fd = -1;  // the child's end of the pipe, for asan_verdict

// In an AddressSanitizer build (WICK_SANITIZE) an allocation over the address-space limit does not throw
// std::bad_alloc and a memory error a library makes on a hostile file (libhdf5's overlapping memcpy) does not
// crash: ASan prints its report and exits with status 1. Its report is turned into the verdict the plain build
// would give (out of memory), or a sanitizer verdict with the report's summary line.
void asan_verdict(const char* text) {
  const std::string_view full(text);
  if (full.find("out of memory") != std::string_view::npos || full.find("out-of-memory") != std::string_view::npos) {
    report(asan_report_fd, 'M', 0, "");
    return;
  }
  std::string_view summary = "AddressSanitizer report";
  if (const size_t at = full.find("SUMMARY: "); at != std::string_view::npos) {
    summary = full.substr(at + 9);
    summary = summary.substr(0, summary.find('\n'));
  }
  report(asan_report_fd, 'S', 0, std::string(summary));
}
#endif

[[noreturn]] void child_main(const std::function<void()>& work, int64_t address_limit, int fd) {
#if defined(__SANITIZE_ADDRESS__)
  asan_report_fd = fd;
  __asan_set_error_report_callback(asan_verdict);
  // A crash ends the child by its signal, as in the plain build (ASan would report it and exit with status 1).
  for (int signal_number : {SIGSEGV, SIGBUS, SIGFPE, SIGILL}) ::signal(signal_number, SIG_DFL);
#endif
  if (address_limit > 0) {
    rlimit limit{static_cast<rlim_t>(address_limit), static_cast<rlim_t>(address_limit)};
    ::setrlimit(RLIMIT_AS, &limit);
  }
  try {
    work();
    report(fd, 'P', 0, "");
  } catch (const std::bad_alloc&) {
    report(fd, 'M', 0, "");
  } catch (const WickError& error) {
    report(fd, 'E', static_cast<int>(error.kind()), message_of(error));
  } catch (const std::exception& error) {
    report(fd, 'E', static_cast<int>(ErrorKind::Data), error.what());
  } catch (...) {
    report(fd, 'E', static_cast<int>(ErrorKind::Data), "unknown exception");
  }
  ::_exit(0);
}

}  // namespace

std::string signal_name(int signal_number) {
  switch (signal_number) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGABRT: return "SIGABRT";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGKILL: return "SIGKILL";
    case SIGTERM: return "SIGTERM";
    default: return "signal " + std::to_string(signal_number);
  }
}

ChildCheckResult run_in_child(const std::function<void()>& work, const ChildCheckLimits& limits) {
  ChildCheckResult result;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    result.outcome = ChildCheckResult::Outcome::Failed;
    result.message = std::string("pipe failed: ") + std::strerror(errno);
    return result;
  }
  const int64_t current = address_space_bytes();
  const int64_t address_limit = current > 0 ? current + limits.extra_address_space_bytes : 0;
  const auto start = std::chrono::steady_clock::now();
  std::fflush(nullptr);  // nothing buffered is written twice (the child writes no stdio anyway)
  const pid_t child = ::fork();
  if (child < 0) {
    result.outcome = ChildCheckResult::Outcome::Failed;
    result.message = std::string("fork failed: ") + std::strerror(errno);
    ::close(fds[0]);
    ::close(fds[1]);
    return result;
  }
  if (child == 0) {
    ::close(fds[0]);
    child_main(work, address_limit, fds[1]);
  }
  ::close(fds[1]);

  // Read the verdict until EOF (the child exited or died) or the deadline.
  std::string record;
  bool timed_out = false;
  const auto deadline = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                    std::chrono::duration<double>(limits.timeout_seconds));
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd poll_fd{fds[0], POLLIN, 0};
    const int ready = ::poll(&poll_fd, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    char buffer[4096];
    const ssize_t n = ::read(fds[0], buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF
    record.append(buffer, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  if (timed_out) ::kill(child, SIGKILL);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  if (timed_out) {
    result.outcome = ChildCheckResult::Outcome::TimedOut;
  } else if (WIFSIGNALED(status)) {
    result.outcome = ChildCheckResult::Outcome::Signaled;
    result.signal_number = WTERMSIG(status);
  } else if (!record.empty() && record[0] == 'P') {
    result.outcome = ChildCheckResult::Outcome::Passed;
  } else if (!record.empty() && record[0] == 'M') {
    result.outcome = ChildCheckResult::Outcome::OutOfMemory;
  } else if (!record.empty() && record[0] == 'S' && record.find('\n') != std::string::npos) {
    result.outcome = ChildCheckResult::Outcome::SanitizerReport;
    result.message = record.substr(record.find('\n') + 1);
#if defined(__SANITIZE_ADDRESS__)
  } else if (record.empty() && address_limit > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 1) {
    // ASan's own report of an allocation over the limit can die before the report callback runs ("internal
    // allocator is out of memory": the limit leaves its report no room) and exits with status 1: out of memory.
    result.outcome = ChildCheckResult::Outcome::OutOfMemory;
#endif
  } else if (!record.empty() && record[0] == 'E' && record.find('\n') != std::string::npos) {
    result.outcome = ChildCheckResult::Outcome::Threw;
    const size_t newline = record.find('\n');
    result.error_kind = static_cast<ErrorKind>(std::atoi(record.substr(1, newline - 1).c_str()));
    result.message = record.substr(newline + 1);
  } else {
    result.outcome = ChildCheckResult::Outcome::Failed;
    result.message = "the child exited with status " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) +
                     " without reporting";
  }
  return result;
}

}  // namespace wick
