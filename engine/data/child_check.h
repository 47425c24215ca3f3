// Runs a read-only check of a file in a forked child process with a time limit and an address-space
// limit, so that a library that crashes, hangs or allocates without bound on a hostile file (libhdf5 on
// a corrupted latent dataset) takes down the child, not wick.
//
//   ChildCheckResult r = run_in_child([&] { open_and_read_everything(path); },
//                                     {.timeout_seconds = 60, .extra_address_space_bytes = 1 << 30});
//   if (r.outcome != ChildCheckResult::Outcome::Passed) refuse(describe(r));
//
// Fork safety: the child runs `work` in the forking thread only, must not touch MPI, CUDA, other
// threads' state or any file it could write, and ends with _exit (no destructors, no atexit handlers).
// Locks another thread might hold at fork time must be reset by `work` (h5::reset_lock_after_fork).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "runtime/error.h"

namespace wick {

struct ChildCheckLimits {
  double timeout_seconds = 60;  // the child is killed (SIGKILL) after this
  // RLIMIT_AS of the child: the parent's address space at fork time plus this many bytes.
  int64_t extra_address_space_bytes = int64_t{1} << 30;
};

struct ChildCheckResult {
  enum class Outcome {
    Passed,      // work returned
    Threw,       // work threw: error_kind and message are the exception's (WickError: its kind)
    OutOfMemory, // std::bad_alloc under the address-space limit
    Signaled,    // the child died by a signal (signal_number)
    TimedOut,    // killed after limits.timeout_seconds
    SanitizerReport,  // (WICK_SANITIZE builds) AddressSanitizer ended the child; message is its summary line
    Failed,      // fork failed, or the child exited without reporting (message says how)
  };
  Outcome outcome = Outcome::Passed;
  ErrorKind error_kind = ErrorKind::Data;
  std::string message;
  int signal_number = 0;
  double seconds = 0;  // wall time from fork to the child's end
};

// Forks, runs `work` in the child under `limits`, waits for it (or kills it at the time limit).
ChildCheckResult run_in_child(const std::function<void()>& work, const ChildCheckLimits& limits);

// "SIGSEGV", "SIGABRT", ... ("signal N" for others).
std::string signal_name(int signal_number);

}  // namespace wick
