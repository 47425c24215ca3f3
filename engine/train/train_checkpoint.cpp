#include "engine/train/train_checkpoint.h"

#include <unistd.h>

#include <cstring>
#include <memory>
#include <optional>
#include <set>

#include "engine/autograd/node.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/latest_pointer.h"
#include "engine/checkpoint/optimizer_shards.h"
#include "runtime/safetensors.h"

namespace fs = std::filesystem;

namespace wick {
namespace {

int64_t broadcast_int(comm::ProcessGroup& group, int64_t value) {
  if (group.size() == 1) return value;
  Tensor t = Tensor::from_vector<int64_t>({value}, {1}, group.device());
  group.broadcast(t, 0);
  return t.to_vector<int64_t>()[0];
}

}  // namespace

// Sent as [bytes, the 32 digest bytes as 4 words] per rank.
std::vector<FileDigest> all_gather_digests(comm::ProcessGroup& group, const FileDigest& mine) {
  WICK_CHECK(mine.sha256.size() == 64 && mine.sha256.find_first_not_of("0123456789abcdef") == std::string::npos,
             "checkpoint: \"", mine.sha256, "\" is not a SHA-256 in lowercase hex");
  if (group.size() == 1) return {mine};
  uint8_t raw[32];
  for (int i = 0; i < 32; ++i) raw[i] = static_cast<uint8_t>(std::stoi(mine.sha256.substr(2 * i, 2), nullptr, 16));
  std::vector<int64_t> words(5);
  words[0] = static_cast<int64_t>(mine.bytes);
  std::memcpy(&words[1], raw, sizeof raw);
  Tensor input = Tensor::from_vector<int64_t>(words, {5}, group.device());
  Tensor output = Tensor::empty({5 * static_cast<int64_t>(group.size())}, DType::I64, group.device());
  group.all_gather(input, output);
  std::vector<int64_t> all = output.to_vector<int64_t>();
  std::vector<FileDigest> out;
  static const char* digits = "0123456789abcdef";
  for (int r = 0; r < group.size(); ++r) {
    std::memcpy(raw, &all[5 * static_cast<size_t>(r) + 1], sizeof raw);
    FileDigest digest{static_cast<uint64_t>(all[5 * static_cast<size_t>(r)]), std::string(64, '0')};
    for (int i = 0; i < 32; ++i) {
      digest.sha256[2 * i] = digits[raw[i] >> 4];
      digest.sha256[2 * i + 1] = digits[raw[i] & 15];
    }
    out.push_back(std::move(digest));
  }
  return out;
}

fs::path save_training_checkpoint(comm::ProcessGroup& group, const CheckpointSave& save) {
  WICK_CHECK(save.trainable != nullptr && save.optimizer != nullptr, "save_training_checkpoint: nothing to save");
  const int rank = group.rank(), world = group.size();
  std::unique_ptr<CheckpointWriter> writer;
  if (rank == 0) writer = std::make_unique<CheckpointWriter>(save.run_dir, save.step);
  const int64_t writer_pid = broadcast_int(group, rank == 0 ? static_cast<int64_t>(::getpid()) : 0);
  const fs::path staging =
      checkpoints_dir(save.run_dir) / (checkpoint_dir_name(save.step) + ".tmp-" + std::to_string(writer_pid));
  if (writer) WICK_CHECK(writer->staging_dir() == staging, "checkpoint: staging directory ", writer->staging_dir().string(),
                         " is not the expected ", staging.string());

  // A sharded optimizer holds only its range (one rank: all of it, in the shard form).
  const bool sharded = save.optimizer->sharded() || (world > 1 && save.shard_optimizer);
  std::optional<FileDigest> shard_digest;  // the same on every rank: whether the ranks wrote shards
  if (save.optimizer->sharded()) {  // ZeRO-1: this rank holds only its range
    shard_digest = save_optimizer_shard((staging / optimizer_shard_file_name(rank, world)).string(),
                                        local_optimizer_shard(*save.optimizer, rank, world));
  } else if (sharded) {
    OptimizerLayout layout = optimizer_layout(*save.optimizer);
    std::vector<OptimizerShard> shards = split_optimizer_state(save.optimizer->state_tensors(), layout,
                                                               zero_partition(layout.flat_numel, world));
    shard_digest = save_optimizer_shard((staging / optimizer_shard_file_name(rank, world)).string(), shards.at(rank));
  }
  // Each shard was hashed by the rank that wrote it; rank 0 lists them without reading them back.
  if (shard_digest) {
    std::vector<FileDigest> digests = all_gather_digests(group, *shard_digest);
    if (writer)
      for (int r = 0; r < world; ++r) writer->record_digest(optimizer_shard_file_name(r, world), digests[r]);
  }
  if (world > 1) group.barrier();
  fs::path committed;
  if (rank == 0) {
    if (!sharded) writer->write_optimizer(*save.optimizer);
    writer->write_model(*save.trainable, save.model_metadata);
    writer->write_training_state(save.state);
    committed = writer->commit(world, save.config_hash);
    prune_checkpoints(save.run_dir, save.keep_last);
  }
  if (world > 1) group.barrier();
  return rank == 0 ? committed : checkpoints_dir(save.run_dir) / checkpoint_dir_name(save.step);
}

std::shared_ptr<const CheckpointFiles> choose_resume_checkpoint(comm::ProcessGroup& group, const fs::path& run_dir,
                                                                const std::string& spec) {
  if (spec == "none") return nullptr;
  int64_t step = -1;
  std::shared_ptr<const CheckpointFiles> chosen;
  if (group.rank() == 0) {
    ResumeChoice choice = find_resume_checkpoint(run_dir, spec);
    chosen = choice.files;
    if (chosen) step = choice.step;
  }
  step = broadcast_int(group, step);
  if (step < 0) return nullptr;
  if (group.rank() == 0) return chosen;
  fs::path dir = spec == "auto" ? checkpoints_dir(run_dir) / checkpoint_dir_name(step) : resolve_checkpoint_path(spec);
  return std::make_shared<const CheckpointFiles>(CheckpointFiles::unverified(dir));
}

void load_trainable_weights(Module& model, const CheckpointFiles& files) {
  SafetensorsFile file = files.safetensors("model.safetensors");
  const std::string& path = file.path();
  std::set<std::string> trainable;
  for (auto& [name, tensor] : model.trainable_parameters()) {
    trainable.insert(name);
    WICK_CHECK_KIND(Data, file.contains(name), path, ": no tensor for the trainable parameter '", name,
                    "' (was the checkpoint written with another network.type or network.target?)");
    Tensor stored = file.get(name);
    WICK_CHECK_KIND(Data, stored.shape() == tensor.shape(), path, ": tensor '", name, "' has shape ",
                    stored.describe(), " but the parameter is ", tensor.describe());
    autograd::detach(tensor).copy_from(stored);
  }
  for (const std::string& name : file.names())
    WICK_CHECK_KIND(Data, trainable.count(name) != 0, path, ": tensor '", name,
                    "' is not a trainable parameter of this model (the config changed what trains?)");
}

}  // namespace wick
