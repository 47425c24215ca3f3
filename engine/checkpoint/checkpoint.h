// Checkpoints of a training run: writing step_<N>/ atomically, verifying it, choosing one to resume
// from, and pruning old ones. docs/checkpoints.md describes the layout and the rules.
//
//   CheckpointWriter writer(run_dir, step);                 // <run>/checkpoints/step_<N>.tmp-<pid>/
//   writer.write_model(module.trainable_parameters());      // model.safetensors
//   writer.write_optimizer(*optimizer);                     // optimizer.safetensors
//   writer.write_training_state(state);                     // training_state.json
//   fs::path dir = writer.commit(world_size, config_hash);  // manifest.json last, fsync, rename, `latest`
//                                                           // (latest_pointer.h: a one-line text file)
//   prune_checkpoints(run_dir, keep_last);
//
//   ResumeChoice resume = find_resume_checkpoint(run_dir, "auto");   // or "none", or a directory
//   if (resume.checkpoint) { ... load from *resume.files (the verified bytes: checkpoint_files.h) ... }
//
// With N ranks, rank 0 constructs the writer and broadcasts staging_dir(); every rank writes its
// optimizer shard there (save_optimizer_shard, optimizer_shards.h, which returns the file's
// digest); rank 0 collects the digests (record_digest), then writes the model and training state
// and commits. Every file is hashed while it is written, so commit() reads nothing back.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/checkpoint/optimizer_shards.h"
#include "engine/checkpoint/sha256.h"
#include "engine/checkpoint/training_state.h"
#include "engine/optim/flat_optimizers.h"

namespace wick {

class Optimizer;
class CheckpointFiles;

inline constexpr const char* kCheckpointFormat = "wick.checkpoint";
inline constexpr int kCheckpointFormatVersion = 1;

// <run_dir>/checkpoints
std::filesystem::path checkpoints_dir(const std::filesystem::path& run_dir);
// "step_00000100" (at least 8 digits).
std::string checkpoint_dir_name(int64_t step);
// The step of a directory named step_<digits> (at least 8 digits, nothing else), else nullopt.
std::optional<int64_t> parse_checkpoint_dir_name(const std::string& name);

struct CheckpointDir {
  int64_t step = 0;
  std::filesystem::path path;
};
// The step_<N> directories under `checkpoints` (not symlinks, not staging), newest first, whatever
// their state. Empty when the folder does not exist.
std::vector<CheckpointDir> list_checkpoint_dirs(const std::filesystem::path& checkpoints);

struct ManifestFile {
  std::string name;    // relative to the checkpoint directory (no '/')
  uint64_t bytes = 0;
  std::string sha256;  // lowercase hex
};

struct CheckpointManifest {
  std::string format;  // "wick.checkpoint"
  int format_version = 0;
  int64_t step = 0;
  int world_size = 1;       // ranks that wrote it
  std::string config_hash;  // supplied by the trainer
  std::string created;      // UTC, ISO 8601
  std::string wick_version;
  std::vector<ManifestFile> files;  // every file of the directory except manifest.json, sorted
};

// Parses <dir>/manifest.json; throws WickError (Data) naming the file and the problem.
CheckpointManifest read_manifest(const std::filesystem::path& checkpoint_dir);

class CheckpointWriter {
 public:
  // Creates <run_dir>/checkpoints/step_<N>.tmp-<pid>/ (and the parents), removing a leftover of
  // the same name. Throws WickError (Data) when it cannot.
  CheckpointWriter(const std::filesystem::path& run_dir, int64_t step);
  // An uncommitted staging directory is removed (the write failed or was abandoned).
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  int64_t step() const { return step_; }
  const std::filesystem::path& staging_dir() const { return staging_; }
  // The final directory <run_dir>/checkpoints/step_<N>.
  const std::filesystem::path& final_dir() const { return final_; }

  // Each write_* hashes the file's bytes as it writes them and records the digest for the manifest.
  // model.safetensors: the trainable parameters (names as given).
  void write_model(const NamedTensors& parameters, const std::map<std::string, std::string>& metadata = {});
  // optimizer.safetensors: the whole state in the per-parameter layout (one rank).
  void write_optimizer(const Optimizer& optimizer);
  void write_optimizer_state(const NamedTensors& state, const OptimizerLayout& layout);
  // optimizer.rank<R>-of-<N>.safetensors (ZeRO: each rank writes its own).
  void write_optimizer_shard(const OptimizerShard& shard);
  // training_state.json.
  void write_training_state(const TrainingState& state);
  // The digest of a file that another process wrote into staging_dir() (another rank's shard), as
  // that writer computed it; commit() then lists it without reading it. `name` has no '/'.
  void record_digest(const std::string& name, const FileDigest& digest);

  // Fsyncs every file, writes manifest.json (sizes and SHA-256 of every other file) last, fsyncs
  // it and the directory, renames step_<N>.tmp-<pid> to step_<N> (an existing step_<N> is
  // replaced), fsyncs checkpoints/, then points `latest` at it (write_latest: a one-line text file
  // replaced atomically; latest_pointer.h). Returns the final directory. The manifest takes the digests
  // recorded while writing; a file without one (put into staging_dir() by other means) is read
  // back and hashed (such files in parallel). A recorded size that differs from the file's is a
  // Data error (the file changed after it was written).
  std::filesystem::path commit(int world_size, const std::string& config_hash);

 private:
  std::filesystem::path checkpoints_, staging_, final_;
  int64_t step_ = 0;
  bool committed_ = false;
  std::map<std::string, FileDigest> digests_;  // by file name, recorded while writing
};

enum class CheckpointState {
  Valid,
  Incomplete,  // no manifest.json: the writer died before finishing
  Corrupt,     // manifest unreadable, or a file missing, of the wrong size or with the wrong hash
};
const char* checkpoint_state_name(CheckpointState state);  // "valid", "incomplete", "corrupt"

struct CheckpointReport {
  std::filesystem::path dir;
  CheckpointState state = CheckpointState::Incomplete;
  std::optional<CheckpointManifest> manifest;  // when it parsed
  std::vector<std::string> problems;           // why it is not valid, one line each
  std::vector<std::string> notes;              // harmless findings (files not in the manifest)
  bool valid() const { return state == CheckpointState::Valid; }
  // "valid" or "corrupt: model.safetensors: 96 bytes, the manifest says 128; ..."
  std::string describe() const;
};

// Checks that the manifest is present and parses, names this format, matches the directory's
// step, and that every listed file is present with the listed size and (when check_hashes) SHA-256.
// Files are hashed in parallel (one thread per file, up to the hardware's threads) and nothing is
// kept: to load what was verified, use CheckpointFiles::verify (checkpoint_files.h, where this is
// defined).
CheckpointReport verify_checkpoint(const std::filesystem::path& checkpoint_dir, bool check_hashes = true);

struct ResumeChoice {
  std::optional<std::filesystem::path> checkpoint;  // empty: start from scratch
  int64_t step = 0;
  std::optional<CheckpointManifest> manifest;
  // The chosen checkpoint's files as verified (CheckpointFiles::verify): load from these, and each
  // byte is read from the disk once. Null when starting from scratch.
  std::shared_ptr<const CheckpointFiles> files;
  std::vector<std::string> warnings;  // one per skipped directory, naming it (also printed)
};

// spec "none": start from scratch. "auto": the checkpoint with the highest step under
// <run_dir>/checkpoints whose manifest verifies (every byte hashed); broken ones are skipped with a
// warning naming them (printed on stderr as "wick: warning: ..."); none valid: start from scratch.
// Any other spec is a checkpoint directory that must verify, else WickError (Data) with the
// problems (<run>/checkpoints/latest: the directory it names, resolve_checkpoint_path). Only a
// checkpoint that verified is chosen, and its verified files come with it.
ResumeChoice find_resume_checkpoint(const std::filesystem::path& run_dir, const std::string& spec);

struct PruneReport {
  std::vector<std::filesystem::path> removed;  // old valid checkpoints and stale staging directories
  std::vector<std::filesystem::path> kept;     // valid checkpoints kept
  std::vector<std::string> warnings;           // broken directories left in place, naming them
};

// Keeps the newest keep_last valid checkpoints (keep_last <= 0: keeps all) and the one `latest`
// names (read_latest); removes older valid ones. Directories without a valid manifest are never removed
// (an older valid checkpoint is never given up for them, and they are left for inspection; a
// warning names them). Staging directories step_<N>.tmp-<pid> (and step_<N>.replaced-<pid>) whose
// writer process no longer exists on this machine are removed.
PruneReport prune_checkpoints(const std::filesystem::path& run_dir, int keep_last, bool check_hashes = true);

}  // namespace wick
