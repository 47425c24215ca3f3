#include "engine/train/train_checkpoint.h"

#include <unistd.h>

#include <memory>
#include <set>

#include "engine/autograd/node.h"
#include "engine/checkpoint/checkpoint.h"
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
  if (save.optimizer->sharded()) {  // ZeRO-1: this rank holds only its range
    save_optimizer_shard((staging / optimizer_shard_file_name(rank, world)).string(),
                         local_optimizer_shard(*save.optimizer, rank, world));
  } else if (sharded) {
    OptimizerLayout layout = optimizer_layout(*save.optimizer);
    std::vector<OptimizerShard> shards = split_optimizer_state(save.optimizer->state_tensors(), layout,
                                                               zero_partition(layout.flat_numel, world));
    save_optimizer_shard((staging / optimizer_shard_file_name(rank, world)).string(), shards.at(rank));
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

std::optional<fs::path> choose_resume_checkpoint(comm::ProcessGroup& group, const fs::path& run_dir,
                                                 const std::string& spec) {
  if (spec == "none") return std::nullopt;
  int64_t step = -1;
  std::optional<fs::path> chosen;
  if (group.rank() == 0) {
    ResumeChoice choice = find_resume_checkpoint(run_dir, spec);
    chosen = choice.checkpoint;
    if (chosen) step = choice.step;
  }
  step = broadcast_int(group, step);
  if (step < 0) return std::nullopt;
  if (group.rank() == 0) return chosen;
  return spec == "auto" ? checkpoints_dir(run_dir) / checkpoint_dir_name(step) : fs::path(spec);
}

void load_trainable_weights(Module& model, const fs::path& checkpoint_dir) {
  const std::string path = (checkpoint_dir / "model.safetensors").string();
  SafetensorsFile file = SafetensorsFile::open(path);
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
