// Before step 1 of `wick train`: the memory estimate of the run (models/memory_estimate.h), printed
// by rank 0, and the refusal of a run whose estimate exceeds what the device has (docs/training.md
// "Memory").
//
//   MemoryEstimate m = check_training_memory(config, *model, geometry, *group, device);
//   // rank 0: "wick train: memory estimate per rank: weights 23.8 GB (frozen bf16) + ... = 27.8 GB
//   //          of the 79.1 GB cuda:0 has"; a run that cannot fit: WickError Config (exit status 2)
//
// What the device has: its free memory now (a GPU's cudaMemGetInfo, the host's MemAvailable) plus
// what this process's tensors hold already (the model). WICK_SKIP_MEMORY_CHECK=1 in the environment
// turns the refusal into a warning, for when the estimate is wrong.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "engine/config/train_config.h"
#include "models/architecture.h"
#include "models/memory_estimate.h"

namespace wick {

// What `config` and the dataset's geometry tell the estimate (the largest bucket by area; the
// process group's ranks; sharding where the step loop shards: several ranks, or a communicator).
MemoryInputs memory_inputs(const TrainConfig& config, const DataGeometry& data, const comm::ProcessGroup& group,
                           Device device);

// What the run must fit in per rank: train.max_memory (--max-memory) when set, else the device's free
// memory plus what this process holds; nullopt when the device cannot tell.
std::optional<int64_t> memory_budget(const TrainConfig& config, Device device);

// The refusal message for an estimate above `capacity` bytes on `device_name`, with the numbers and
// the settings that would lower it (memory_suggestions); nullopt when the estimate fits.
std::optional<std::string> memory_refusal(const MemoryEstimate& estimate, int64_t capacity,
                                          const std::string& device_name, const std::vector<std::string>& suggestions);

// Estimates, prints (rank 0) and refuses (every rank, agreed over `group`, so that no rank waits for
// one that stopped): a WickError of kind Config naming the numbers and what to change. Returns the
// estimate.
MemoryEstimate check_training_memory(const TrainConfig& config, const DiffusionModel& model, const DataGeometry& data,
                                     comm::ProcessGroup& group, Device device);

}  // namespace wick
