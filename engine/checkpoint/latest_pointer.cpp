// `latest`: the text file, the old symlink, a copy tool's directory; resolving and repairing it.
#include "engine/checkpoint/latest_pointer.h"

#include <sys/stat.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

#include "engine/checkpoint/checkpoint.h"
#include "runtime/atomic_file.h"
#include "runtime/error.h"

namespace fs = std::filesystem;

namespace wick {
namespace {

constexpr size_t kMaxLatestBytes = 4096;

std::string file_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error = errno;
    WICK_FAIL(Data, "cannot read ", path.string(), ": ", std::strerror(error));
  }
  std::string text(kMaxLatestBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  return text;
}

bool same_bytes(const fs::path& a, const fs::path& b) {
  std::ifstream in_a(a, std::ios::binary), in_b(b, std::ios::binary);
  if (!in_a || !in_b) return false;
  std::stringstream text_a, text_b;
  text_a << in_a.rdbuf();
  text_b << in_b.rdbuf();
  return text_a.str() == text_b.str();
}

std::string utc_stamp() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y%m%dT%H%M%SZ", &tm);
  return text;
}

void rename_or_fail(const fs::path& from, const fs::path& to, const char* why) {
  std::error_code error;
  fs::rename(from, to, error);
  if (error)
    WICK_FAIL(Data, "checkpoints: ", from.string(), " is a directory (", why, ") and cannot be renamed to ",
              to.string(), ": ", error.message());
}

}  // namespace

const char* latest_form_name(LatestForm form) {
  switch (form) {
    case LatestForm::Missing: return "missing";
    case LatestForm::File: return "file";
    case LatestForm::Symlink: return "symlink";
    case LatestForm::Directory: return "directory";
    case LatestForm::Other: return "other";
  }
  return "?";
}

LatestPointer read_latest(const fs::path& checkpoints) {
  LatestPointer latest;
  latest.path = checkpoints / kLatestName;
  struct stat info {};
  if (::lstat(latest.path.c_str(), &info) != 0) return latest;  // Missing
  if (S_ISLNK(info.st_mode)) {
    latest.form = LatestForm::Symlink;
    std::error_code error;
    fs::path target = fs::read_symlink(latest.path, error);
    if (error) {
      latest.problem = "cannot read the symlink: " + error.message();
    } else {
      latest.checkpoint = target.is_absolute() ? target : checkpoints / target;
    }
    return latest;
  }
  if (S_ISDIR(info.st_mode)) {
    latest.form = LatestForm::Directory;
    latest.problem = "a directory, not a pointer (a copy tool followed the symlink older wick wrote?)";
    return latest;
  }
  if (!S_ISREG(info.st_mode)) {
    latest.form = LatestForm::Other;
    latest.problem = "not a file, a symlink nor a directory";
    return latest;
  }
  latest.form = LatestForm::File;
  std::string text = file_text(latest.path);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  if (text.size() > kMaxLatestBytes || !parse_checkpoint_dir_name(text)) {
    latest.problem = "expected one line naming a checkpoint directory such as step_00000500, found \"" +
                     text.substr(0, 64) + (text.size() > 64 ? "...\"" : "\"");
    return latest;
  }
  latest.checkpoint = checkpoints / text;
  return latest;
}

fs::path resolve_checkpoint_path(const fs::path& given) {
  fs::path path = given;
  if (!path.has_filename() && path.has_parent_path()) path = path.parent_path();  // ".../latest/"
  if (path.filename() != kLatestName) return given;
  const fs::path checkpoints = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  LatestPointer latest = read_latest(checkpoints);
  switch (latest.form) {
    case LatestForm::Missing:
      WICK_FAIL(Data, given.string(), " does not exist (no checkpoint was committed in ", checkpoints.string(), ")");
    case LatestForm::Directory: {
      // Stale: the step directories decide.
      for (const auto& [step, dir] : list_checkpoint_dirs(checkpoints))
        if (fs::exists(dir / "manifest.json")) return dir;
      return path;
    }
    case LatestForm::Other:
      WICK_FAIL(Data, given.string(), ": ", latest.problem);
    case LatestForm::File:
      // A file of another kind that happens to be called `latest`, outside a checkpoints folder.
      if (!latest.checkpoint && checkpoints.filename() != "checkpoints") return given;
      break;
    case LatestForm::Symlink:
      break;
  }
  if (!latest.checkpoint) WICK_FAIL(Data, given.string(), ": ", latest.problem);
  std::error_code error;
  if (!fs::is_directory(*latest.checkpoint, error))
    WICK_FAIL(Data, given.string(), " names ", latest.checkpoint->filename().string(), ", but ",
              latest.checkpoint->string(), " is not a directory (removed, or left out by a copy?)");
  return *latest.checkpoint;
}

void write_latest(const fs::path& checkpoints, const std::string& name) {
  WICK_CHECK(parse_checkpoint_dir_name(name).has_value(), "write_latest: \"", name, "\" is not a checkpoint directory name");
  LatestRepair repair = repair_latest(checkpoints);
  if (repair.changed) std::fprintf(stderr, "wick: note: %s\n", repair.message.c_str());
  write_file_atomically(checkpoints / kLatestName, name + "\n");
}

LatestRepair repair_latest(const fs::path& checkpoints, const std::optional<fs::path>& verified) {
  LatestRepair repair;
  const fs::path latest = checkpoints / kLatestName;
  struct stat info {};
  if (::lstat(latest.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) return repair;
  repair.changed = true;

  std::optional<CheckpointManifest> manifest;
  try {
    manifest = read_manifest(latest);
  } catch (const WickError&) {
  }
  if (manifest) {
    const fs::path twin = checkpoints / checkpoint_dir_name(manifest->step);
    std::error_code error;
    if (!fs::exists(fs::symlink_status(twin, error))) {
      rename_or_fail(latest, twin, "holding the checkpoint of a step that has no directory");
      fsync_directory(checkpoints);
      write_file_atomically(latest, twin.filename().string() + "\n");
      repair.message = latest.string() + " was a directory holding the checkpoint of step " +
                       std::to_string(manifest->step) + " (a copy tool followed the symlink?); renamed to " +
                       twin.string() + ", and `latest` names it";
      return repair;
    }
    const bool twin_verified = verified && fs::equivalent(*verified, twin, error);
    if (same_bytes(latest / "manifest.json", twin / "manifest.json") &&
        (twin_verified || verify_checkpoint(twin).valid())) {
      fs::remove_all(latest, error);
      if (error)
        WICK_FAIL(Data, "checkpoints: ", latest.string(), " is a copy of ", twin.string(),
                  " (a copy tool followed the symlink?) and cannot be removed: ", error.message());
      fsync_directory(checkpoints);
      write_file_atomically(latest, twin.filename().string() + "\n");
      repair.message = latest.string() + " was a directory, a copy of " + twin.string() +
                       " (which verifies) made by a copy tool that followed the symlink; removed, and `latest` names " +
                       twin.filename().string();
      return repair;
    }
  }
  fs::path aside = checkpoints / (std::string(kLatestName) + ".moved-" + utc_stamp());
  for (int n = 1; fs::exists(fs::symlink_status(aside)); ++n)
    aside = checkpoints / (std::string(kLatestName) + ".moved-" + utc_stamp() + "-" + std::to_string(n));
  rename_or_fail(latest, aside, "not a copy of a valid checkpoint");
  fsync_directory(checkpoints);
  repair.message = latest.string() + " was a directory that is not a copy of a valid checkpoint; moved to " +
                   aside.string() + " (nothing deleted; remove it when it is not needed)";
  return repair;
}

}  // namespace wick
