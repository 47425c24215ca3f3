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
 * (tests/train/preemption_test.sh). WICK_FAULT_ON=slow-open delays each open(2) of a path containing
 * WICK_FAULT_PATH the same way (a slow network file system while a run starts). With WICK_FAULT_MARK set,
 * a delay first creates that file, so that a test knows the process is inside it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
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

/* Sleeps WICK_FAULT_DELAY_MS (resuming after signals that interrupt it), after creating WICK_FAULT_MARK. */
static void delay(void) {
  const char* mark = getenv("WICK_FAULT_MARK");
  if (mark != NULL && *mark != '\0') {
    static int (*real_open)(const char*, int, ...);
    if (real_open == NULL) real_open = (int (*)(const char*, int, ...))dlsym(RTLD_NEXT, "open");
    int fd = real_open(mark, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) close(fd);
  }
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

static int slow_open(const char* path) {
  const char* on = getenv("WICK_FAULT_ON");
  const char* pattern = getenv("WICK_FAULT_PATH");
  return on != NULL && strcmp(on, "slow-open") == 0 && pattern != NULL && *pattern != '\0' && path != NULL &&
         strstr(path, pattern) != NULL;
}

/* open, open64 and openat with the optional mode argument passed on. */
#define WICK_OPEN_MODE(flags, mode)                     \
  mode_t mode = 0;                                      \
  if ((flags) & (O_CREAT | O_TMPFILE)) {                \
    va_list args;                                       \
    va_start(args, flags);                              \
    mode = (mode_t)va_arg(args, int);                   \
    va_end(args);                                       \
  }

int open(const char* path, int flags, ...) {
  static int (*real)(const char*, int, ...);
  if (real == NULL) real = (int (*)(const char*, int, ...))dlsym(RTLD_NEXT, "open");
  WICK_OPEN_MODE(flags, mode)
  if (slow_open(path)) delay();
  return real(path, flags, mode);
}

int open64(const char* path, int flags, ...) {
  static int (*real)(const char*, int, ...);
  if (real == NULL) real = (int (*)(const char*, int, ...))dlsym(RTLD_NEXT, "open64");
  WICK_OPEN_MODE(flags, mode)
  if (slow_open(path)) delay();
  return real(path, flags, mode);
}

int openat(int dir, const char* path, int flags, ...) {
  static int (*real)(int, const char*, int, ...);
  if (real == NULL) real = (int (*)(int, const char*, int, ...))dlsym(RTLD_NEXT, "openat");
  WICK_OPEN_MODE(flags, mode)
  if (slow_open(path)) delay();
  return real(dir, path, flags, mode);
}
