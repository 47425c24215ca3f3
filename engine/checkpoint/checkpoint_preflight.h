// Before the first step of a run: can its next checkpoint be written? A run that would find out at
// its first save (a read-only folder, a `latest` a copy tool turned into a directory, a full disk)
// stops here instead, before anything is trained.
//
//   PreflightReport report = check_checkpoint_target(run_dir, {.estimate_bytes = bytes, .verified = resumed_dir});
//   for (const std::string& note : report.notes) std::fprintf(stderr, "wick: note: %s\n", note.c_str());
//
// The checks, in order (docs/checkpoints.md "Checked before step 1"):
// 1. <run>/checkpoints exists (created) and a file can be created in it: else a Config error naming it;
// 2. `latest` is replaceable: a directory there (a copy tool followed the old symlink) is cleared by
//    repair_latest (latest_pointer.h; a note says what it did), anything else unreplaceable is a
//    Data error naming it;
// 3. free space (statvfs, the blocks available to this user) holds one more checkpoint the size of
//    the newest one there (every file of the newest step_<N> holding a manifest), else of
//    estimate_bytes; too little is a Data error naming the folder, both sizes and the override.
//    WICK_SKIP_SPACE_CHECK=1 in the environment skips it (a note says so); with no checkpoint and
//    no estimate it is skipped with a note.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace wick {

inline constexpr const char* kSkipSpaceCheckVariable = "WICK_SKIP_SPACE_CHECK";

struct PreflightOptions {
  uint64_t estimate_bytes = 0;                        // a checkpoint's size when none exists yet (0: unknown)
  std::optional<std::filesystem::path> verified;      // a checkpoint verified already (the resumed one)
  std::optional<uint64_t> free_bytes;                 // assume this much free space instead of statvfs (tests)
};

struct PreflightReport {
  uint64_t needed_bytes = 0;    // 0 when the space check was skipped
  uint64_t free_bytes = 0;
  std::string basis;            // where needed_bytes comes from ("the newest checkpoint ...", "an estimate ...")
  std::vector<std::string> notes;
};

// The checks above; throws WickError (Config or Data) naming the path on the first that fails.
PreflightReport check_checkpoint_target(const std::filesystem::path& run_dir, const PreflightOptions& options = {});

// "1.5 GB", "320.0 MB", "12 KB" (decimal units), for messages.
std::string format_bytes(uint64_t bytes);

}  // namespace wick
