// The generic training loop: micro-steps with gradient accumulation, gradient buckets overlapped with
// backward (or one staged all-reduce), the non-finite skip, the fp16 loss scaler, the optimizer step
// with the LR schedule, checkpoints with typed state (resumable on any rank count), metrics and the
// progress display. It knows no model and no objective: a TrainingTask gives it the loss.
//
//   StepLoopSetup setup{.name = "run", .run_dir = "output/run", .config_yaml = yaml, .config_hash = hash,
//                       .train = config.train, .save = config.save, .distributed = config.distributed,
//                       .group = group, .device = device, .dataset = dataset, .ids = ids, .bucket_of = buckets};
//   LoopResult r = run_step_loop(task, setup, {.resume = "auto"});
//
// Resuming (auto or a checkpoint directory) loads the task's trainable weights, the optimizer state
// (resharded to this world size), the data position and the counters, and continues bitwise: the
// same losses as an uninterrupted run at the same world size. max_nonfinite_steps non-finite losses
// in a row end the run with a Training error (exit status 4), the last checkpoint untouched.
// SIGTERM or SIGUSR1 on any rank stops every rank after the current step with a checkpoint
// (LoopResult::preempted; engine/train/preemption.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "engine/config/train_config.h"
#include "engine/data/latent_dataset.h"
#include "engine/train/training_task.h"

namespace wick {

struct StepLoopOptions {
  std::string resume = "auto";  // auto | none | a checkpoint directory (docs/checkpoints.md)
  bool progress = true;         // rank 0 draws a progress bar on stderr
  // End this process after this step (0 = run to train.steps), after writing a checkpoint there:
  // a time-sliced job continues with --resume auto. Never past train.steps.
  int64_t stop_after_step = 0;
  // `wick train --dry-run`: train() checks the config, the dataset, the weights (the model is built) and the memory
  // plan, prints them, and returns before the run directory is made or the step loop starts.
  bool dry_run = false;
};

struct StepLoopSetup {
  std::string name;                     // the run's name, in messages
  std::filesystem::path run_dir;        // checkpoints/, metrics.jsonl, config.yaml
  std::string config_yaml;              // written to run_dir/config.yaml before the first step
  std::string config_hash;              // recorded in checkpoints; a resume under another hash warns
  const TrainSection& train;            // steps, batch, optimizer, schedule, seed, precision, logging
  const SaveConfig& save;               // checkpoint cadence and pruning
  const DistributedConfig& distributed; // sharding and buckets
  std::shared_ptr<comm::ProcessGroup> group;
  Device device;                        // where the parameters live
  std::shared_ptr<LatentDataset> dataset;
  std::vector<int64_t> ids;             // eligible sample ids, ascending
  std::vector<int64_t> bucket_of;       // the bucket of each id
  // Regularization samples of the same dataset, reg_per_batch of them at the end of every rank's batch
  // (DistributedSampler); reg_per_batch 0 = none.
  std::vector<int64_t> reg_ids, reg_bucket_of;
  int64_t reg_per_batch = 0;
  int64_t memory_estimate_bytes = 0;    // the task's estimate of a step's peak per rank (0 = none), in messages
  // Micro-batches each rank's share of a global batch is trained in, with their gradients
  // accumulated (1 = the whole share at once): chosen from the memory estimate when
  // train.global_batch_size is set and the share would not fit. The same on every rank.
  int64_t share_splits = 1;
};

struct LoopResult {
  std::filesystem::path run_dir;
  int64_t first_step = 1;               // the first step this call ran (checkpoint step + 1 on resume)
  int64_t last_step = 0;                // the last step this call finished
  std::vector<double> losses;           // per step this call ran; NaN for a skipped (non-finite) step
  int64_t skipped_steps = 0;            // over the whole run (resumes included)
  std::optional<std::filesystem::path> resumed_from;
  std::optional<std::filesystem::path> last_checkpoint;
  int world_size = 1;
  int rank = 0;
  // SIGTERM or SIGUSR1 reached a rank: every rank stopped after step last_step, with a checkpoint
  // there (unless that step was skipped for a non-finite loss); `wick train` exits with status 75
  // (kExitPreempted, engine/train/preemption.h).
  bool preempted = false;
};

// Runs the loop on this process's rank (every rank of setup.group calls it). Rank 0 writes the
// logs; every rank writes its optimizer shard into checkpoints.
LoopResult run_step_loop(TrainingTask& task, const StepLoopSetup& setup, const StepLoopOptions& options);

}  // namespace wick
