// One job per run directory: rank 0 of `wick train` holds an exclusive lock on <run>/.wick.lock for the job's life,
// so that a second job on the same run (started by hand, or a requeue that starts while the killed job's ranks
// still train for a second) is refused instead of writing checkpoints beside it (docs/checkpoints.md "One job per
// run directory").
//
//   RunLock lock = RunLock::acquire(run_dir, {.wait_s = 30});   // WickError (Config) naming the holder
//   ... train ...                                                // released by ~RunLock or when the process dies
//
// The lock is an fcntl record lock on an open file description (F_OFD_SETLK): the kernel drops it when the
// process ends, however it ends (kill -9 included), and on NFS the client passes record locks to the server's lock
// manager (NLM for NFSv3, the protocol's own locks for NFSv4), so two nodes sharing output_dir see each other's
// lock (flock(2) is local-only on NFS clients before Linux 2.6.12 and on other systems). The file holds the holder's
// host, pid and start time for the refusal's message; it stays behind (a lock file nobody holds locks nothing).
#pragma once

#include <filesystem>
#include <string>

namespace wick {

// How long `wick train --resume auto` waits for another job's lock: the ranks of a job whose mpirun was killed train
// on for about a second (docs/distributed.md), a requeue may start within it.
inline constexpr double kRunLockWaitSeconds = 30;

struct RunLockOptions {
  double wait_s = 0;       // retry this long while another process holds the lock (a job that is ending)
  double poll_s = 0.2;     // between tries
  bool announce = true;    // print one line on stderr when it starts to wait
};

class RunLock {
 public:
  // Locks <run_dir>/.wick.lock (created if missing). WickError (Config) naming the holder (host, pid, start
  // time) when another process still holds it after options.wait_s; (Config) when the file cannot be created.
  static RunLock acquire(const std::filesystem::path& run_dir, const RunLockOptions& options = {});
  RunLock(RunLock&& other) noexcept;
  RunLock& operator=(RunLock&& other) noexcept;
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;
  ~RunLock();  // releases the lock (closes the file)

  // "host <h>, pid <p>, since <UTC time>" as written into the file by the holder.
  const std::string& holder() const { return holder_; }

 private:
  RunLock(int fd, std::string holder) : fd_(fd), holder_(std::move(holder)) {}
  int fd_ = -1;
  std::string holder_;
};

// The lock file of a run directory.
std::filesystem::path run_lock_path(const std::filesystem::path& run_dir);

}  // namespace wick
