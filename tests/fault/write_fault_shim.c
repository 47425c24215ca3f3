/* An LD_PRELOAD library that makes writes to chosen files fail, as on a full disk or a failing
 * drive, for the write-failure tests (tests/train/write_failure_test.sh).
 *
 *   WICK_FAULT_PATH=step_00000020 WICK_FAULT_AFTER=0 WICK_FAULT_ERRNO=ENOSPC \
 *     LD_PRELOAD=libwick_write_fault.so wick train run.yaml
 *
 * A file is chosen when its path (/proc/self/fd/N) contains WICK_FAULT_PATH. WICK_FAULT_AFTER bytes
 * (over all chosen files; default 0) are written, then write(2) fails with WICK_FAULT_ERRNO (ENOSPC,
 * the default, or EIO); a write that straddles the limit is cut short first, as the kernel does.
 * WICK_FAULT_ON=fsync instead leaves writes alone and fails fsync/fdatasync of chosen files.
 * WICK_FAULT_ON=slow-fsync makes fsync/fdatasync of chosen files succeed after WICK_FAULT_DELAY_MS
 * milliseconds (default 1000): a slow disk, so that a test can signal a process inside a save
 * (tests/train/preemption_test.sh). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static long long written; /* bytes written to chosen files so far */

static int chosen(int fd) {
  const char* pattern = getenv("WICK_FAULT_PATH");
  char link[64], path[4096];
  if (pattern == NULL || *pattern == '\0') return 0;
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, path, sizeof path - 1);
  if (n <= 0) return 0;
  path[n] = '\0';
  return strstr(path, pattern) != NULL;
}

static int fault_errno(void) {
  const char* name = getenv("WICK_FAULT_ERRNO");
  return name != NULL && strcmp(name, "EIO") == 0 ? EIO : ENOSPC;
}

static int on_fsync(void) {
  const char* on = getenv("WICK_FAULT_ON");
  return on != NULL && strcmp(on, "fsync") == 0;
}

static int slow_fsync(void) {
  const char* on = getenv("WICK_FAULT_ON");
  return on != NULL && strcmp(on, "slow-fsync") == 0;
}

/* Sleeps WICK_FAULT_DELAY_MS (resuming after signals that interrupt it). */
static void delay(void) {
  const char* text = getenv("WICK_FAULT_DELAY_MS");
  long long ms = text != NULL ? atoll(text) : 1000;
  struct timespec left = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  while (nanosleep(&left, &left) != 0 && errno == EINTR) {
  }
}

ssize_t write(int fd, const void* data, size_t n) {
  static ssize_t (*real_write)(int, const void*, size_t);
  if (real_write == NULL) real_write = (ssize_t(*)(int, const void*, size_t))dlsym(RTLD_NEXT, "write");
  if (on_fsync() || slow_fsync() || !chosen(fd)) return real_write(fd, data, n);
  const char* after = getenv("WICK_FAULT_AFTER");
  long long budget = (after != NULL ? atoll(after) : 0) - __atomic_load_n(&written, __ATOMIC_SEQ_CST);
  if (budget <= 0) {
    errno = fault_errno();
    return -1;
  }
  ssize_t done = real_write(fd, data, (long long)n < budget ? n : (size_t)budget);
  if (done > 0) __atomic_add_fetch(&written, done, __ATOMIC_SEQ_CST);
  return done;
}

int fsync(int fd) {
  static int (*real_fsync)(int);
  if (real_fsync == NULL) real_fsync = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
  if (on_fsync() && chosen(fd)) {
    errno = fault_errno();
    return -1;
  }
  if (slow_fsync() && chosen(fd)) delay();
  return real_fsync(fd);
}

int fdatasync(int fd) {
  static int (*real_fdatasync)(int);
  if (real_fdatasync == NULL) real_fdatasync = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
  if (on_fsync() && chosen(fd)) {
    errno = fault_errno();
    return -1;
  }
  if (slow_fsync() && chosen(fd)) delay();
  return real_fdatasync(fd);
}
