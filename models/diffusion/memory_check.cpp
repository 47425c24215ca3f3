#include "models/diffusion/memory_check.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "engine/train/grad_sync.h"
#include "runtime/error.h"
#include "runtime/memory.h"

namespace wick {
namespace {

bool skip_requested() {
  const char* value = std::getenv("WICK_SKIP_MEMORY_CHECK");
  return value != nullptr && std::strcmp(value, "") != 0 && std::strcmp(value, "0") != 0;
}

}  // namespace

MemoryInputs memory_inputs(const TrainConfig& config, const DataGeometry& data, const comm::ProcessGroup& group,
                           Device device) {
  const TrainSection& t = config.train;
  MemoryInputs in{.batch_size = t.batch_size,
                  .text_length = data.text_length,
                  .text_dim = data.text_dim,
                  .latent_channels = data.latent_channels,
                  .pooled_dim = data.pooled_dim,
                  .gradient_checkpointing = t.gradient_checkpointing,
                  .optimizer = t.optimizer,
                  .sgd_momentum = !t.betas.empty() && t.betas[0] > 0.0,
                  .world_size = group.size(),
                  .gradient_accumulation = t.gradient_accumulation,
                  .min_snr_weights = t.min_snr_gamma > 0.0,
                  .device = device};
  in.blocks_to_swap = std::max<int64_t>(0, t.blocks_to_swap);  // a built model's float8 layers count as they are
  for (const auto& [h, w] : data.latent_sizes)
    if (h * w > in.latent_height * in.latent_width) in.latent_height = h, in.latent_width = w;
  // engine/train/step_loop.cpp shards with a communicator on the parameters' device.
  in.shard_optimizer = config.distributed.shard_optimizer && group.backend() != "single" && group.device() == device;
  return in;
}

std::optional<int64_t> memory_budget(const TrainConfig& config, Device device) {
  if (config.train.max_memory > 0) return config.train.max_memory;
  std::optional<int64_t> available = available_memory_bytes(device);
  if (!available) return std::nullopt;
  const MemoryStats held = memory_stats(device);
  return *available + held.current_bytes + held.cached_bytes;
}

std::optional<std::string> memory_refusal(const MemoryEstimate& estimate, int64_t capacity,
                                          const std::string& device_name, const std::vector<std::string>& suggestions) {
  if (estimate.total <= capacity) return std::nullopt;
  std::string message = "the run needs an estimated " + format_bytes(estimate.total) + " per rank but " + device_name +
                        " has " + format_bytes(capacity) +
                        (device_name == "train.max_memory" ? "" : " (free now plus what wick holds)") + ": " +
                        describe(estimate) +
                        ". ";
  if (suggestions.empty()) {
    message += "No setting wick knows lowers the estimate: train on a device with more memory";
  } else {
    message += "What lowers it:";
    for (const std::string& s : suggestions) message += "\n  " + s;
  }
  message += "\nIf the estimate is wrong, WICK_SKIP_MEMORY_CHECK=1 runs anyway (docs/training.md \"Memory\")";
  return message;
}

MemoryEstimate check_training_memory(const TrainConfig& config, const DiffusionModel& model, const DataGeometry& data,
                                     comm::ProcessGroup& group, Device device) {
  const MemoryInputs in = memory_inputs(config, data, group, device);
  const MemoryEstimate estimate = estimate_training_memory(model, in);
  const bool rank0 = group.rank() == 0;
  const std::optional<int64_t> capacity = memory_budget(config, device);
  const std::string where = config.train.max_memory > 0 ? "train.max_memory budget" : device.str() + " has";
  if (rank0) {
    std::string line = "wick train: memory estimate per rank: " + describe(estimate);
    if (capacity) line += " of the " + format_bytes(*capacity) + " " + where;
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::optional<std::string> refusal;
  if (capacity) {
    const MemoryAdvice advice{.lora_rank = config.network.type == NetworkType::Full ? 0 : config.network.linear,
                              .model_dtype = config.model.dtype};
    if (estimate.total > *capacity)
      refusal = memory_refusal(estimate, *capacity, config.train.max_memory > 0 ? "train.max_memory" : device.str(),
                               memory_suggestions(model, in, estimate, advice, *capacity));
  }
  // Every rank learns whether any rank refuses, so that all of them stop here together.
  const bool any_refuses = all_reduce_sum(group, {refusal ? 1.0 : 0.0})[0] > 0.0;
  if (!any_refuses) return estimate;
  if (skip_requested()) {
    if (rank0)
      std::fprintf(stderr, "wick: warning: %s\nwick: warning: WICK_SKIP_MEMORY_CHECK is set: running anyway\n",
                   refusal ? refusal->c_str() : "another rank's device cannot fit the run");
    return estimate;
  }
  WICK_FAIL(Config, refusal ? *refusal
                            : std::string("another rank's device cannot fit the run (its message names "
                                          "the numbers); WICK_SKIP_MEMORY_CHECK=1 runs anyway"));
}

}  // namespace wick
