// engine/train/run_lock.h: one job per run directory. A second holder is refused naming the first; the lock goes when
// its holder closes it or dies (however it dies); a waiting acquire takes it once it is free.
#include "engine/train/run_lock.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <thread>

#include "runtime/error.h"

namespace wick {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("wick_run_lock_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string config_error_of(const fs::path& dir, const RunLockOptions& options) {
  try {
    RunLock::acquire(dir, options);
  } catch (const WickError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Config);
    return e.what();
  }
  return "no error";
}

TEST(RunLock, ASecondHolderIsRefusedNamingTheFirst) {
  const fs::path dir = fresh_dir("second");
  std::optional<RunLock> first = RunLock::acquire(dir);
  EXPECT_THAT(first->holder(), HasSubstr("pid " + std::to_string(::getpid()) + ", since "));
  const std::string refused = config_error_of(dir, {.announce = false});
  EXPECT_THAT(refused, HasSubstr("another job is training in " + dir.string()));
  EXPECT_THAT(refused, HasSubstr(first->holder()));
  EXPECT_THAT(refused, HasSubstr("one job per run directory"));
  // Waiting does not help while it is held: refused after the wait, which the message states.
  const auto started = std::chrono::steady_clock::now();
  EXPECT_THAT(config_error_of(dir, {.wait_s = 0.3, .poll_s = 0.05, .announce = false}), HasSubstr("waited 0.3 s"));
  EXPECT_GE(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(), 0.3);
  first.reset();  // released
  EXPECT_NO_THROW(RunLock::acquire(dir));
}

TEST(RunLock, AWaitingAcquireTakesTheLockOnceItsHolderLetsGo) {
  const fs::path dir = fresh_dir("wait");
  std::optional<RunLock> first = RunLock::acquire(dir);
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    first.reset();
  });
  std::optional<RunLock> second;
  EXPECT_NO_THROW(second.emplace(RunLock::acquire(dir, {.wait_s = 10, .poll_s = 0.02, .announce = false})));
  release.join();
  ASSERT_TRUE(second);
  EXPECT_THAT(second->holder(), HasSubstr("pid " + std::to_string(::getpid())));
}

// A holder killed with SIGKILL holds nothing: the kernel drops the lock with the process. (The child takes the lock
// as RunLock does, an OFD record lock on the same file.)
TEST(RunLock, AKilledHoldersLockIsGone) {
  const fs::path dir = fresh_dir("killed");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // only system calls after fork (the parent has threads): the lock, the holder's line, the pipe
    const int fd = ::open(run_lock_path(dir).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    struct flock lock = {};
    lock.l_type = F_WRLCK;
    lock.l_whence = SEEK_SET;
    if (fd < 0 || ::fcntl(fd, F_OFD_SETLK, &lock) != 0) ::_exit(1);
    char line[64];
    const int n = std::snprintf(line, sizeof line, "host test, pid %d, since now\n", static_cast<int>(::getpid()));
    const char byte = 1;
    if (::write(fd, line, static_cast<size_t>(n)) != n || ::write(ready[1], &byte, 1) != 1) ::_exit(1);
    ::pause();
    ::_exit(0);
  }
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  EXPECT_THAT(config_error_of(dir, {.announce = false}), HasSubstr("pid " + std::to_string(child) + ", since "));
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_NO_THROW(RunLock::acquire(dir));
  ::close(ready[0]);
  ::close(ready[1]);
}

}  // namespace
}  // namespace wick
