// Checkpoints of a training run across ranks (the format: docs/checkpoints.md).
//
//   auto files = choose_resume_checkpoint(*group, run_dir, "auto");   // rank 0 decides and verifies
//   if (files) load_trainable_weights(*model, *files);    // before the optimizer is built
//   ... optimizer->load_state(load_optimizer_state(*files)); ... files->text("training_state.json") ...
//   fs::path saved = save_training_checkpoint(*group, {...});   // every rank calls it
//
// Saving: rank 0 creates the staging directory and broadcasts its writer's process id; with
// shard_optimizer and several ranks, or a sharded optimizer (also one rank of an NCCL group), each
// rank writes its ZeRO-1 shard of the optimizer state (optimizer.rank<R>-of-<N>.safetensors, hashed
// while written) and the digests are all-gathered to rank 0, otherwise rank 0 writes
// optimizer.safetensors; after a barrier rank 0 writes model.safetensors (the trainable parameters)
// and training_state.json, commits (manifest last, rename, `latest`) and prunes to keep_last; a
// second barrier ends the call.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "comm/process_group.h"
#include "engine/checkpoint/checkpoint_files.h"
#include "engine/checkpoint/training_state.h"
#include "engine/module.h"
#include "engine/optim/optimizer.h"

namespace wick {

struct CheckpointSave {
  std::filesystem::path run_dir;
  int64_t step = 0;
  const std::vector<std::pair<std::string, Tensor>>* trainable = nullptr;  // model.safetensors
  const Optimizer* optimizer = nullptr;
  TrainingState state;
  std::map<std::string, std::string> model_metadata;
  std::string config_hash;
  bool shard_optimizer = true;  // with several ranks: one optimizer file per rank (a sharded optimizer always)
  int keep_last = 0;            // prune_checkpoints after the commit (0 = keep all)
};

// Every rank calls it; returns the committed directory (on every rank).
std::filesystem::path save_training_checkpoint(comm::ProcessGroup& group, const CheckpointSave& save);

// Every rank's digest, in rank order, on every rank (collective: every rank calls it). How rank 0
// learns the digests of the shard files the other ranks wrote, for the manifest.
std::vector<FileDigest> all_gather_digests(comm::ProcessGroup& group, const FileDigest& mine);

// Rank 0 applies find_resume_checkpoint(run_dir, spec) (warnings printed there) and gets the chosen
// checkpoint's verified files (loading reads the bytes it hashed); the other ranks get the same
// directory's files unverified. Null on every rank: start from scratch.
std::shared_ptr<const CheckpointFiles> choose_resume_checkpoint(comm::ProcessGroup& group,
                                                                const std::filesystem::path& run_dir,
                                                                const std::string& spec);

// Copies the checkpoint's model.safetensors into the trainable parameters of `model`. Every trainable
// parameter must be there with its shape, and every tensor of the file must be a trainable parameter;
// otherwise a Data error naming the tensor (the config changed what trains?). Nothing is modified
// when `files` did not verify (CheckpointFiles throws before any copy).
void load_trainable_weights(Module& model, const CheckpointFiles& files);

}  // namespace wick
