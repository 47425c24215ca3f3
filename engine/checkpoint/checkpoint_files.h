// The files of one checkpoint directory, opened for loading. A verified set maps every file the
// manifest lists once and hashes it through that mapping (several files on several threads); the
// loaders then read the same mapped bytes, so a resume reads each byte from the disk once and can
// only ever load bytes whose SHA-256 matched. A set that did not verify hands out nothing.
//
//   CheckpointFiles files = CheckpointFiles::verify(dir);              // every byte hashed
//   if (!files.report().valid()) { ... skip it: files.report().describe() ... }
//   SafetensorsFile model = files.safetensors("model.safetensors");   // the hashed bytes
//   NamedTensors state = load_optimizer_state(files);                  // optimizer_shards.h
//   TrainingState t = training_state_from_json(files.text("training_state.json"), "...");
//
//   CheckpointFiles plain = CheckpointFiles::unverified(dir);          // read from the disk as asked
//
// verify_checkpoint (checkpoint.h), the report without keeping anything mapped, is defined here too.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint.h"
#include "runtime/mapped_file.h"
#include "runtime/safetensors.h"

namespace wick {

class CheckpointFiles {
 public:
  // Checks the directory as verify_checkpoint(dir) does (manifest, step, every listed file's size
  // and SHA-256), hashing each file through a private mapping that it keeps for loading. Files are
  // hashed in parallel, one thread per file, up to std::thread::hardware_concurrency(). Never
  // throws for a broken checkpoint: report() says what is wrong.
  static CheckpointFiles verify(const std::filesystem::path& dir);
  // No verification: files are opened from the disk when asked for (ranks other than the one that
  // verified, tools that read a single file).
  static CheckpointFiles unverified(const std::filesystem::path& dir);

  const std::filesystem::path& dir() const { return dir_; }
  bool verified() const { return verified_; }
  // verify(): the verification report. unverified(): nothing was checked (state Valid, no manifest).
  const CheckpointReport& report() const { return report_; }

  // Everything below throws WickError (Data) naming the problems when the set did not verify.
  // The names of the checkpoint's files (no manifest.json): verify(): the manifest's list;
  // unverified(): the regular files in the directory. Sorted.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const;

  // A file of the checkpoint, by name (no '/'). Also throws WickError (Data) when a verified set's
  // manifest does not list `name`, or when the file cannot be opened or parsed.
  SafetensorsFile safetensors(const std::string& name) const;
  std::string text(const std::string& name) const;

 private:
  CheckpointFiles() = default;
  void check_loadable() const;
  std::shared_ptr<MappedFile> mapped(const std::string& name) const;

  std::filesystem::path dir_;
  bool verified_ = false;
  CheckpointReport report_;
  std::map<std::string, std::shared_ptr<MappedFile>> files_;  // verify(): every listed file, mapped
};

}  // namespace wick
