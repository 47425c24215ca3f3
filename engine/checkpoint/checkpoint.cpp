// Checkpoint directories: the atomic write protocol, manifests, verification, resume and pruning.
#include "engine/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "engine/checkpoint/checkpoint_files.h"
#include "engine/checkpoint/latest_pointer.h"
#include "engine/checkpoint/parallel_for.h"
#include "engine/checkpoint/sha256.h"
#include "engine/optim/optimizer.h"
#include "runtime/atomic_file.h"
#include "runtime/error.h"
#include "runtime/safetensors.h"
#include "wick/build_info.h"

namespace wick {
namespace fs = std::filesystem;
namespace {

constexpr const char* kManifestName = "manifest.json";

void fsync_file(const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    WICK_FAIL(Data, "checkpoint: cannot open ", path.string(), " to fsync it: ", std::strerror(error));
  }
  int status = ::fsync(fd);
  int error = errno;
  ::close(fd);
  if (status != 0) WICK_FAIL(Data, "checkpoint: fsync of ", path.string(), " failed: ", std::strerror(error));
}

void rename_or_fail(const fs::path& from, const fs::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    const int error = errno;
    WICK_FAIL(Data, "checkpoint: cannot rename ", from.string(), " to ", to.string(), ": ", std::strerror(error));
  }
}

std::string utc_now() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

// "step_00000100.tmp-1234" -> 1234 for the suffixes that mark a writer's leftovers.
std::optional<long> leftover_pid(const std::string& name) {
  static const std::regex pattern(R"((step_\d{8,}\.(tmp|replaced)|latest\.tmp)-(\d+))");
  std::smatch match;
  if (!std::regex_match(name, match, pattern)) return std::nullopt;
  try {
    return std::stol(match[3].str());
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// A zombie (exited, never reaped: a rank orphaned by its launcher under a container's first process,
// which may never reap) still holds its pid but writes nothing more: dead, for a leftover's sake.
bool process_alive(long pid) {
  if (pid <= 0) return false;
  if (pid == static_cast<long>(::getpid())) return true;
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return true;  // no /proc: trust kill()
  const size_t name_end = text.rfind(')');     // "pid (name) S ...": the name may hold spaces and ')'
  if (name_end == std::string::npos || name_end + 2 >= text.size()) return true;
  const char state = text[name_end + 2];
  return state != 'Z' && state != 'X';
}

void warn(const std::string& message) { std::fprintf(stderr, "wick: warning: %s\n", message.c_str()); }

}  // namespace

fs::path checkpoints_dir(const fs::path& run_dir) { return run_dir / "checkpoints"; }

std::vector<CheckpointDir> list_checkpoint_dirs(const fs::path& checkpoints) {
  std::vector<CheckpointDir> out;
  std::error_code error;
  if (!fs::is_directory(checkpoints, error)) return out;
  for (const fs::directory_entry& entry : fs::directory_iterator(checkpoints, error)) {
    if (entry.is_symlink() || !entry.is_directory()) continue;
    if (auto step = parse_checkpoint_dir_name(entry.path().filename().string())) out.push_back({*step, entry.path()});
  }
  if (error) WICK_FAIL(Data, "checkpoint: cannot list ", checkpoints.string(), ": ", error.message());
  std::sort(out.begin(), out.end(), [](const CheckpointDir& a, const CheckpointDir& b) { return a.step > b.step; });
  return out;
}

std::string checkpoint_dir_name(int64_t step) {
  WICK_CHECK(step >= 0, "checkpoint: step must be >= 0, got ", step);
  char text[40];
  std::snprintf(text, sizeof text, "step_%08lld", static_cast<long long>(step));
  return text;
}

std::optional<int64_t> parse_checkpoint_dir_name(const std::string& name) {
  static const std::regex pattern(R"(step_(\d{8,18}))");
  std::smatch match;
  if (!std::regex_match(name, match, pattern)) return std::nullopt;
  return std::stoll(match[1].str());
}

// ---- manifest ----

CheckpointManifest read_manifest(const fs::path& checkpoint_dir) {
  fs::path path = checkpoint_dir / kManifestName;
  std::ifstream in(path);
  if (!in) WICK_FAIL(Data, path.string(), ": cannot open (", std::strerror(errno), ")");
  std::stringstream text;
  text << in.rdbuf();
  try {
    nlohmann::json json = nlohmann::json::parse(text.str());
    CheckpointManifest m;
    m.format = json.at("format").get<std::string>();
    if (m.format != kCheckpointFormat)
      WICK_FAIL(Data, path.string(), ": format is \"", m.format, "\", expected \"", kCheckpointFormat, "\"");
    m.format_version = json.at("format_version").get<int>();
    if (m.format_version > kCheckpointFormatVersion)
      WICK_FAIL(Data, path.string(), ": format_version ", m.format_version, " is newer than this wick reads (",
                kCheckpointFormatVersion, ")");
    m.step = json.at("step").get<int64_t>();
    m.world_size = json.at("world_size").get<int>();
    m.config_hash = json.at("config_hash").get<std::string>();
    m.created = json.at("created").get<std::string>();
    m.wick_version = json.value("wick_version", "");
    for (const nlohmann::json& file : json.at("files")) {
      ManifestFile f{file.at("name").get<std::string>(), file.at("bytes").get<uint64_t>(),
                     file.at("sha256").get<std::string>()};
      if (f.name.empty() || f.name.find('/') != std::string::npos || f.name == "." || f.name == ".." ||
          f.name == kManifestName)
        WICK_FAIL(Data, path.string(), ": bad file name \"", f.name, "\" in \"files\"");
      m.files.push_back(std::move(f));
    }
    return m;
  } catch (const nlohmann::json::exception& e) {
    WICK_FAIL(Data, path.string(), ": not a valid manifest (", e.what(), ")");
  }
}

// ---- writer ----

CheckpointWriter::CheckpointWriter(const fs::path& run_dir, int64_t step)
    : checkpoints_(checkpoints_dir(run_dir)), step_(step) {
  std::string name = checkpoint_dir_name(step);
  final_ = checkpoints_ / name;
  staging_ = checkpoints_ / (name + ".tmp-" + std::to_string(::getpid()));
  std::error_code error;
  fs::create_directories(checkpoints_, error);
  if (error) WICK_FAIL(Data, "checkpoint: cannot create ", checkpoints_.string(), ": ", error.message());
  fs::remove_all(staging_, error);
  fs::create_directory(staging_, error);
  if (error) WICK_FAIL(Data, "checkpoint: cannot create ", staging_.string(), ": ", error.message());
}

CheckpointWriter::~CheckpointWriter() {
  if (committed_) return;
  std::error_code error;
  fs::remove_all(staging_, error);
}

void CheckpointWriter::write_model(const NamedTensors& parameters, const std::map<std::string, std::string>& metadata) {
  std::map<std::string, std::string> all = metadata;
  all.emplace("format", "pt");
  all.emplace("wick_step", std::to_string(step_));
  Sha256 digest;
  save_safetensors((staging_ / "model.safetensors").string(), parameters, all,
                   [&digest](const void* data, size_t bytes) { digest.update(data, bytes); });
  digests_["model.safetensors"] = digest.finish();
}

void CheckpointWriter::write_optimizer(const Optimizer& optimizer) {
  write_optimizer_state(optimizer.state_tensors(), optimizer_layout(optimizer));
}

void CheckpointWriter::write_optimizer_state(const NamedTensors& state, const OptimizerLayout& layout) {
  digests_["optimizer.safetensors"] = save_optimizer_state((staging_ / "optimizer.safetensors").string(), state, layout);
}

void CheckpointWriter::write_optimizer_shard(const OptimizerShard& shard) {
  const std::string name = optimizer_shard_file_name(shard.rank, shard.world_size);
  digests_[name] = save_optimizer_shard((staging_ / name).string(), shard);
}

void CheckpointWriter::write_training_state(const TrainingState& state) {
  digests_["training_state.json"] = save_training_state((staging_ / "training_state.json").string(), state);
}

void CheckpointWriter::record_digest(const std::string& name, const FileDigest& digest) {
  WICK_CHECK(!name.empty() && name.find('/') == std::string::npos && name != kManifestName,
             "checkpoint: record_digest: bad file name \"", name, "\"");
  WICK_CHECK(digest.sha256.size() == 64, "checkpoint: record_digest: ", name, ": \"", digest.sha256,
             "\" is not a SHA-256 in hex");
  digests_[name] = digest;
}

fs::path CheckpointWriter::commit(int world_size, const std::string& config_hash) {
  WICK_CHECK(!committed_, "checkpoint: step ", step_, " was already committed");
  WICK_CHECK(world_size >= 1, "checkpoint: world_size must be >= 1, got ", world_size);
  // Every file, synced; its digest as recorded while it was written, or (a file put there by other
  // means) read back and hashed, such files in parallel.
  std::vector<fs::path> files;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(staging_, error)) {
    std::string name = entry.path().filename().string();
    if (name == kManifestName) continue;
    if (!entry.is_regular_file() || entry.is_symlink())
      WICK_FAIL(Data, "checkpoint: ", entry.path().string(), " is not a regular file (checkpoints are flat)");
    files.push_back(entry.path());
  }
  if (error) WICK_FAIL(Data, "checkpoint: cannot list ", staging_.string(), ": ", error.message());
  std::sort(files.begin(), files.end());
  std::vector<FileDigest> digests(files.size());
  std::vector<size_t> unrecorded;
  for (size_t i = 0; i < files.size(); ++i) {
    fsync_file(files[i]);
    auto recorded = digests_.find(files[i].filename().string());
    if (recorded == digests_.end()) {
      unrecorded.push_back(i);
      continue;
    }
    uint64_t bytes = fs::file_size(files[i], error);
    if (error) WICK_FAIL(Data, "checkpoint: cannot stat ", files[i].string(), ": ", error.message());
    if (bytes != recorded->second.bytes)
      WICK_FAIL(Data, "checkpoint: ", files[i].string(), " is ", bytes, " bytes but ", recorded->second.bytes,
                " were written (changed after it was written?)");
    digests[i] = recorded->second;
  }
  std::vector<std::string> failures(files.size());
  parallel_for(unrecorded.size(), [&](size_t k) {
    size_t i = unrecorded[k];
    try {
      digests[i].sha256 = sha256_file(files[i].string(), &digests[i].bytes);
    } catch (const std::exception& e) {
      failures[i] = e.what();
    }
  });
  nlohmann::json listed = nlohmann::json::array();
  for (size_t i = 0; i < files.size(); ++i) {
    if (!failures[i].empty()) throw WickError(ErrorKind::Data, "checkpoint: " + failures[i]);
    listed.push_back({{"name", files[i].filename().string()}, {"bytes", digests[i].bytes}, {"sha256", digests[i].sha256}});
  }
  nlohmann::json manifest = {
      {"format", kCheckpointFormat},
      {"format_version", kCheckpointFormatVersion},
      {"step", step_},
      {"world_size", world_size},
      {"config_hash", config_hash},
      {"created", utc_now()},
      {"wick_version", std::string(WICK_VERSION) + " (" + WICK_GIT_COMMIT + ")"},
      {"files", listed},
  };
  write_file_atomically(staging_ / kManifestName, manifest.dump(2) + "\n");  // fsyncs the staging directory

  // An existing step_<N> (a re-run of the same step) is moved aside, replaced, then removed.
  fs::path replaced;
  if (fs::exists(fs::symlink_status(final_))) {
    replaced = checkpoints_ / (final_.filename().string() + ".replaced-" + std::to_string(::getpid()));
    fs::remove_all(replaced, error);
    rename_or_fail(final_, replaced);
  }
  rename_or_fail(staging_, final_);
  committed_ = true;
  fsync_directory(checkpoints_);
  if (!replaced.empty()) fs::remove_all(replaced, error);

  // `latest`: a one-line text file replaced atomically (latest_pointer.h).
  try {
    write_latest(checkpoints_, final_.filename().string());
  } catch (const WickError& error) {
    throw WickError(error.kind(), final_.string() + " is complete, but `latest` was not updated: " + error.what());
  }
  return final_;
}

// ---- verification ----

const char* checkpoint_state_name(CheckpointState state) {
  switch (state) {
    case CheckpointState::Valid: return "valid";
    case CheckpointState::Incomplete: return "incomplete";
    case CheckpointState::Corrupt: return "corrupt";
  }
  return "?";
}

std::string CheckpointReport::describe() const {
  std::string out = checkpoint_state_name(state);
  for (size_t i = 0; i < problems.size(); ++i) out += (i == 0 ? ": " : "; ") + problems[i];
  return out;
}

// ---- resume ----

ResumeChoice find_resume_checkpoint(const fs::path& run_dir, const std::string& spec) {
  ResumeChoice choice;
  if (spec == "none") return choice;
  if (spec.empty()) WICK_FAIL(Config, "--resume: expected auto, none or a checkpoint directory, got \"\"");
  if (spec == "auto") {
    fs::path checkpoints = checkpoints_dir(run_dir);
    for (const CheckpointDir& candidate : list_checkpoint_dirs(checkpoints)) {
      auto files = std::make_shared<const CheckpointFiles>(CheckpointFiles::verify(candidate.path));
      const CheckpointReport& report = files->report();
      if (report.valid()) {
        choice.checkpoint = candidate.path;
        choice.step = report.manifest->step;
        choice.manifest = report.manifest;
        choice.files = std::move(files);
        return choice;
      }
      std::string message = "resume: skipping checkpoint " + candidate.path.string() + " (" + report.describe() + ")";
      warn(message);
      choice.warnings.push_back(message);
    }
    if (!choice.warnings.empty()) {
      std::string message = "resume: no valid checkpoint in " + checkpoints.string() + "; starting from scratch";
      warn(message);
      choice.warnings.push_back(message);
    }
    return choice;
  }
  fs::path path = resolve_checkpoint_path(spec);  // <run>/checkpoints/latest: the directory it names
  std::error_code error;
  if (!fs::exists(path, error)) WICK_FAIL(Data, "resume: checkpoint ", spec, " does not exist");
  fs::path resolved = fs::canonical(path, error);
  if (error) resolved = path;
  auto files = std::make_shared<const CheckpointFiles>(CheckpointFiles::verify(resolved));
  const CheckpointReport& report = files->report();
  if (!report.valid()) WICK_FAIL(Data, "resume: checkpoint ", spec, " is not usable: ", report.describe());
  choice.checkpoint = resolved;
  choice.step = report.manifest->step;
  choice.manifest = report.manifest;
  choice.files = std::move(files);
  return choice;
}

// ---- pruning ----

PruneReport prune_checkpoints(const fs::path& run_dir, int keep_last, bool check_hashes) {
  PruneReport report;
  fs::path checkpoints = checkpoints_dir(run_dir);
  std::error_code error;
  if (!fs::is_directory(checkpoints, error)) return report;

  // Leftovers of writers that no longer run.
  for (const fs::directory_entry& entry : fs::directory_iterator(checkpoints, error)) {
    std::optional<long> pid = leftover_pid(entry.path().filename().string());
    if (!pid || process_alive(*pid)) continue;
    std::error_code removed;
    fs::remove_all(entry.path(), removed);
    if (!removed) report.removed.push_back(entry.path());
  }

  fs::path latest_target;  // the one `latest` names (file or old symlink) is never removed
  try {
    if (std::optional<fs::path> named = read_latest(checkpoints).checkpoint) latest_target = *named;
  } catch (const WickError& e) {
    warn(std::string("prune: ") + e.what());
  }

  int n_valid = 0;
  for (const CheckpointDir& candidate : list_checkpoint_dirs(checkpoints)) {
    CheckpointReport verified = verify_checkpoint(candidate.path, check_hashes);
    if (!verified.valid()) {
      std::string message = "prune: leaving broken checkpoint " + candidate.path.string() + " in place (" +
                            verified.describe() + ")";
      warn(message);
      report.warnings.push_back(message);
      continue;
    }
    ++n_valid;
    bool is_latest = !latest_target.empty() && fs::equivalent(candidate.path, latest_target, error);
    if (keep_last <= 0 || n_valid <= keep_last || is_latest) {
      report.kept.push_back(candidate.path);
      continue;
    }
    std::error_code removed;
    fs::remove_all(candidate.path, removed);
    if (removed) {
      std::string message = "prune: cannot remove " + candidate.path.string() + ": " + removed.message();
      warn(message);
      report.warnings.push_back(message);
    } else {
      report.removed.push_back(candidate.path);
    }
  }
  if (!report.removed.empty()) fsync_directory(checkpoints);
  return report;
}

}  // namespace wick
