// Before step 1 of `wick train`: the memory estimate of the run (models/memory/memory_estimate.h), printed
// by rank 0, and the refusal of a run whose estimate exceeds what the device has (docs/training.md
// "Memory").
//
//   TrainingMemory m = check_training_memory(config, *model, geometry, *group, device);
//   // rank 0: "wick train: memory estimate per rank: weights 23.8 GB (frozen bf16) + ... = 27.8 GB
//   //          of the 79.1 GB cuda:0 has"; a run that cannot fit: WickError Config (exit status 2)
//
// What the device has: its free memory now (a GPU's cudaMemGetInfo, the host's MemAvailable) plus
// what this process's tensors hold already (the model), capped by WICK_MEMORY_LIMIT (bytes, or with
// a unit: 500MB, 20GB, 16GiB) when it is set. WICK_SKIP_MEMORY_CHECK=1 in the environment turns the
// refusal into a warning (and keeps the shares whole), for when the estimate is wrong.
//
// With train.global_batch_size, a rank's share that would not fit is trained in several
// micro-batches with their gradients accumulated (TrainingMemory::share_splits, the fewest that
// fit, agreed by every rank); rank 0 prints the choice.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "engine/config/train_config.h"
#include "models/architecture.h"
#include "models/memory/memory_estimate.h"

namespace wick {

// What `config` and the dataset's geometry tell the estimate (the largest bucket by area; the
// process group's ranks; the largest rank's share of train.global_batch_size when set; sharding
// where the step loop shards: several ranks, or a communicator).
MemoryInputs memory_inputs(const TrainConfig& config, const DataGeometry& data, const comm::ProcessGroup& group,
                           Device device);

// What the run must fit in per rank: train.max_memory (--max-memory) when set, else the device's free
// memory plus what this process holds; capped by WICK_MEMORY_LIMIT when that is set; nullopt when
// neither is set and the device cannot tell.
std::optional<int64_t> memory_budget(const TrainConfig& config, Device device);

// The refusal message for an estimate above `capacity` bytes on `device_name`, with the numbers and
// the settings that would lower it (memory_suggestions); nullopt when the estimate fits.
std::optional<std::string> memory_refusal(const MemoryEstimate& estimate, int64_t capacity,
                                          const std::string& device_name, const std::vector<std::string>& suggestions);

// WICK_MEMORY_LIMIT parsed ("12345", "500MB", "1.5GB", "16GiB"); nullopt when unset or empty. A
// value that is not a positive size is a Config error.
std::optional<int64_t> memory_limit_from_environment();

// The fewest pieces (2, 3, ... up to `share`) a share of `share` samples per rank must be trained
// in for `fits(batch_size, gradient_accumulation)` to hold, trying each distinct largest piece
// ceil(share / k) once; nullopt when not even pieces of one sample fit. `accumulation` is
// train.gradient_accumulation.
template <typename Fits>
std::optional<int64_t> fewest_share_splits(int64_t share, int64_t accumulation, Fits fits) {
  int64_t tried = share;
  for (int64_t k = 1; k <= share; ++k) {
    const int64_t piece = (share + k - 1) / k;
    if (k > 1 && piece == tried) continue;  // the same largest piece as fewer splits
    tried = piece;
    if (fits(piece, accumulation * k)) return k;
  }
  return std::nullopt;
}

struct TrainingMemory {
  MemoryEstimate estimate;   // per rank, for the micro-batch the run trains (a piece when split)
  int64_t share_splits = 1;  // StepLoopSetup::share_splits
};

// Estimates, chooses the share splits (global batch runs), prints (rank 0) and refuses (every rank,
// agreed over `group`, so that no rank waits for one that stopped): a WickError of kind Config
// naming the numbers and what to change.
TrainingMemory check_training_memory(const TrainConfig& config, const DiffusionModel& model, const DataGeometry& data,
                                     comm::ProcessGroup& group, Device device);

}  // namespace wick
