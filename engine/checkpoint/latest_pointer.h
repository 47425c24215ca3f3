// <run>/checkpoints/latest: which checkpoint a run finished last, in a form every copy tool keeps.
//
//   write_latest(checkpoints, "step_00000500");   // a text file "step_00000500\n", replaced atomically
//   LatestPointer latest = read_latest(checkpoints);          // the file, an old symlink, or a copy's directory
//   fs::path dir = resolve_checkpoint_path("output/run/checkpoints/latest");   // .../step_00000500
//   LatestRepair repair = repair_latest(checkpoints);         // a directory left by `cp -rL`: made replaceable
//
// Every reader of `latest` (resume from a path, model.name_or_path, wick sample / eval, wick
// checkpoint inspect, pruning) goes through read_latest / resolve_checkpoint_path. Older runs hold a
// relative symlink `latest -> step_<N>`, which is read the same way. A copy tool that follows
// symlinks (cp -rL, shutil.copytree, object-store sync) turns that symlink into a directory: such a
// directory is stale (it names nothing; readers fall back to the step directories) and repair_latest
// clears it before the next save without deleting anything that is not a duplicate of a valid
// checkpoint. docs/checkpoints.md "latest".
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace wick {

inline constexpr const char* kLatestName = "latest";

enum class LatestForm {
  Missing,    // no `latest` (no checkpoint committed yet, or a copy tool skipped the symlink)
  File,       // the text file this wick writes
  Symlink,    // the relative symlink older wick wrote
  Directory,  // a plain directory: a copy tool followed the symlink (stale)
  Other,      // anything else (a fifo, ...)
};
const char* latest_form_name(LatestForm form);  // "missing", "file", "symlink", "directory", "other"

struct LatestPointer {
  LatestForm form = LatestForm::Missing;
  std::filesystem::path path;                       // <checkpoints>/latest
  std::optional<std::filesystem::path> checkpoint;  // File, Symlink: the directory named (may not exist)
  std::string problem;                              // File: why its text names no checkpoint
};

// Reads <checkpoints>/latest. A file must hold one line naming a checkpoint directory of the same
// folder (step_<N>; trailing whitespace allowed), else `problem` says why. Never throws for what it
// finds; throws WickError (Data) only when the file exists and cannot be read.
LatestPointer read_latest(const std::filesystem::path& checkpoints);

// The checkpoint directory a user's path means. A path whose last component is `latest`: the
// directory the pointer names (Data error naming the pointer when it names none or a missing one);
// for a stale directory, the newest step_<N> beside it that holds a manifest.json (itself when there
// is none). Any other path, and a `latest` file that names no checkpoint outside a folder called
// `checkpoints` (some other file of that name), is returned unchanged.
std::filesystem::path resolve_checkpoint_path(const std::filesystem::path& path);

// Points <checkpoints>/latest at the checkpoint directory `name` (step_<N>): writes "<name>\n" to
// latest.tmp-<pid>, fsyncs it, renames it over `latest` (a file or an old symlink) and fsyncs the
// folder. A stale directory there is first cleared with repair_latest. Throws WickError (Data).
void write_latest(const std::filesystem::path& checkpoints, const std::string& name);

struct LatestRepair {
  bool changed = false;
  std::string message;  // what was done, naming the paths ("" when `latest` was no directory)
};

// Makes a `latest` that is a directory replaceable, deleting nothing that is not a duplicate:
// * it holds a checkpoint of step N and step_<N> is absent: renamed to step_<N> (verified at resume
//   like any other), and `latest` written naming it;
// * it holds a checkpoint whose manifest.json equals that of step_<N>, and step_<N> verifies (every
//   byte hashed, unless `verified` is that directory): removed, being a copy, and `latest` written
//   naming step_<N>;
// * anything else: renamed to latest.moved-<UTC time> and left for the user (no `latest` until the
//   next save; readers fall back to the step directories meanwhile).
// A `latest` that is not a directory is left alone. Throws WickError (Data) naming the path when a
// rename or removal fails.
LatestRepair repair_latest(const std::filesystem::path& checkpoints,
                           const std::optional<std::filesystem::path>& verified = std::nullopt);

}  // namespace wick
