// The checks before step 1: a writable checkpoints folder, a replaceable `latest`, free space.
#include "engine/checkpoint/checkpoint_preflight.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/latest_pointer.h"
#include "runtime/error.h"

namespace fs = std::filesystem;

namespace wick {
namespace {

void check_writable(const fs::path& checkpoints) {
  std::error_code error;
  fs::create_directories(checkpoints, error);
  WICK_CHECK_KIND(Config, !error && fs::is_directory(checkpoints), "checkpoints folder ", checkpoints.string(),
                  " cannot be created: ", error ? error.message() : std::string("a file of that name exists"),
                  " (check output_dir and name)");
  const fs::path probe = checkpoints / (".write-test-" + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int open_error = errno;
  if (fd >= 0) {
    ::close(fd);
    ::unlink(probe.c_str());
  }
  WICK_CHECK_KIND(Config, fd >= 0, "checkpoints folder ", checkpoints.string(), " is not writable (",
                  std::strerror(open_error), "); check output_dir, or the permissions");
}

// Every regular file of `dir`, in bytes.
uint64_t directory_bytes(const fs::path& dir) {
  uint64_t total = 0;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    std::error_code size_error;
    if (entry.is_regular_file(size_error)) {
      const uint64_t bytes = entry.file_size(size_error);
      if (!size_error) total += bytes;
    }
  }
  return total;
}

}  // namespace

std::string format_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1000.0 && unit < 4) {
    value /= 1000.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.1f %s", value, units[unit]);
  return text;
}

PreflightReport check_checkpoint_target(const fs::path& run_dir, const PreflightOptions& options) {
  PreflightReport report;
  const fs::path checkpoints = checkpoints_dir(run_dir);
  check_writable(checkpoints);

  LatestRepair repair = repair_latest(checkpoints, options.verified);
  if (repair.changed) report.notes.push_back(repair.message);
  const LatestPointer latest = read_latest(checkpoints);
  WICK_CHECK_KIND(Data, latest.form != LatestForm::Other && latest.form != LatestForm::Directory, latest.path.string(),
                  " cannot be replaced at the next checkpoint: ", latest.problem, "; move it away");

  const char* skip = std::getenv(kSkipSpaceCheckVariable);
  if (skip != nullptr && *skip != '\0' && std::string(skip) != "0") {
    report.notes.push_back(std::string("free-space check skipped (") + kSkipSpaceCheckVariable + "=" + skip + ")");
    return report;
  }
  for (const CheckpointDir& candidate : list_checkpoint_dirs(checkpoints)) {
    std::error_code error;
    if (!fs::exists(candidate.path / "manifest.json", error)) continue;
    report.needed_bytes = directory_bytes(candidate.path);
    report.basis = "the size of the newest checkpoint, " + candidate.path.filename().string();
    break;
  }
  if (report.needed_bytes == 0) {
    if (options.estimate_bytes == 0) {
      report.notes.push_back("free-space check skipped: no checkpoint yet and no estimate of its size");
      return report;
    }
    report.needed_bytes = options.estimate_bytes;
    report.basis = "an estimate of one checkpoint (trainable parameters + optimizer state)";
  }
  if (options.free_bytes) {
    report.free_bytes = *options.free_bytes;
  } else {
    struct statvfs info {};
    if (::statvfs(checkpoints.c_str(), &info) != 0) {
      const int error = errno;
      report.notes.push_back("free-space check skipped: statvfs(" + checkpoints.string() + ") failed: " +
                             std::strerror(error));
      report.needed_bytes = 0;
      return report;
    }
    report.free_bytes = static_cast<uint64_t>(info.f_bavail) * static_cast<uint64_t>(info.f_frsize);
  }
  WICK_CHECK_KIND(Data, report.free_bytes >= report.needed_bytes, "not enough free space for the next checkpoint in ",
                  checkpoints.string(), ": ", format_bytes(report.free_bytes), " free, ",
                  format_bytes(report.needed_bytes), " needed (", report.basis,
                  "). Free some space (older checkpoints, save.max_step_saves_to_keep), or set ",
                  kSkipSpaceCheckVariable, "=1 to skip this check");
  return report;
}

}  // namespace wick
