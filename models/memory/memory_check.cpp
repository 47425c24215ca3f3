#include "models/memory/memory_check.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "engine/data/distributed_sampler.h"
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

std::optional<int64_t> memory_limit_from_environment() {
  const char* value = std::getenv("WICK_MEMORY_LIMIT");
  if (value == nullptr || *value == '\0') return std::nullopt;
  static const std::map<std::string, double> units = {
      {"", 1.0},  {"b", 1.0},  {"k", 1e3},  {"kb", 1e3},       {"m", 1e6},          {"mb", 1e6},
      {"g", 1e9}, {"gb", 1e9}, {"tb", 1e12}, {"kib", 1024.0}, {"mib", 1048576.0}, {"gib", 1073741824.0},
      {"tib", 1099511627776.0}};
  char* end = nullptr;
  const double number = std::strtod(value, &end);
  std::string unit(end);
  unit.erase(0, unit.find_first_not_of(' '));
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  auto found = units.find(unit);
  WICK_CHECK_KIND(
      Config,
      end != value && found != units.end() && std::isfinite(number) && number > 0 && number * found->second < 9.2e18,
      "WICK_MEMORY_LIMIT=", value, " is not a size in bytes (e.g. 500MB, 20GB, 16GiB)");
  return static_cast<int64_t>(number * found->second);
}

MemoryInputs memory_inputs(const TrainConfig& config, const DataGeometry& data, const comm::ProcessGroup& group,
                           Device device) {
  const TrainSection& t = config.train;
  // The largest rank's share of a global batch (every rank estimates the same).
  const int64_t batch = t.global_batch_size > 0 ? rank_share(t.global_batch_size, 0, group.size()) : t.batch_size;
  MemoryInputs in{.batch_size = batch,
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
  in.shard_weights = config.distributed.shard_weights;
  if (config.distributed.shard_within_node) in.weight_shard_ranks = group.local_size();
  return in;
}

std::optional<int64_t> memory_budget(const TrainConfig& config, Device device) {
  std::optional<int64_t> budget;
  if (config.train.max_memory > 0) {
    budget = config.train.max_memory;
  } else if (std::optional<int64_t> available = available_memory_bytes(device)) {
    const MemoryStats held = memory_stats(device);
    budget = *available + held.current_bytes + held.cached_bytes;
  }
  const std::optional<int64_t> limit = memory_limit_from_environment();
  if (limit) budget = budget ? std::min(*budget, *limit) : *limit;
  return budget;
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

TrainingMemory check_training_memory(const TrainConfig& config, const DiffusionModel& model, const DataGeometry& data,
                                     comm::ProcessGroup& group, Device device) {
  MemoryInputs in = memory_inputs(config, data, group, device);
  const MemoryEstimate whole = estimate_training_memory(model, in);
  const bool rank0 = group.rank() == 0;
  const std::optional<int64_t> capacity = memory_budget(config, device);
  const std::optional<int64_t> limit = memory_limit_from_environment();
  const std::string where = config.train.max_memory > 0 ? "train.max_memory budget" : device.str() + " has";

  // A global batch whose share does not fit: the fewest pieces that do (the most any rank needs).
  TrainingMemory plan{.estimate = whole};
  const int64_t share = in.batch_size;
  if (config.train.global_batch_size > 0 && capacity && whole.total > *capacity && !skip_requested()) {
    std::optional<int64_t> splits =
        fewest_share_splits(share, in.gradient_accumulation, [&](int64_t piece, int64_t accumulation) {
          MemoryInputs smaller = in;
          smaller.batch_size = piece;
          smaller.gradient_accumulation = accumulation;
          return estimate_training_memory(model, smaller).total <= *capacity;
        });
    plan.share_splits = splits.value_or(share);  // none fits: pieces of one sample, refused below
  }
  if (config.train.global_batch_size > 0) {  // every rank takes the most pieces any rank needs
    std::vector<double> wanted(static_cast<size_t>(group.size()), 0.0);
    wanted[static_cast<size_t>(group.rank())] = static_cast<double>(plan.share_splits);
    const std::vector<double> agreed = all_reduce_sum(group, wanted);
    plan.share_splits = static_cast<int64_t>(*std::max_element(agreed.begin(), agreed.end()));
  }
  if (plan.share_splits > 1) {
    in.batch_size = (share + plan.share_splits - 1) / plan.share_splits;
    in.gradient_accumulation *= plan.share_splits;
    plan.estimate = estimate_training_memory(model, in);
  }
  const MemoryEstimate& estimate = plan.estimate;

  if (rank0) {
    std::string line = "wick train: memory estimate per rank: " + describe(estimate);
    if (capacity) line += " of the " + format_bytes(*capacity) + " " + where;
    if (limit && capacity == limit) line += " (WICK_MEMORY_LIMIT)";
    std::fprintf(stderr, "%s\n", line.c_str());
    if (plan.share_splits > 1 && capacity && estimate.total <= *capacity)
      std::fprintf(stderr,
                   "wick train: a share of %lld samples per rank would need an estimated %s; each share is trained "
                   "in %lld micro-batches of at most %lld sample%s with their gradients accumulated (automatic "
                   "gradient accumulation: the same gradient, the same global batches)\n",
                   static_cast<long long>(share), format_bytes(whole.total).c_str(),
                   static_cast<long long>(plan.share_splits), static_cast<long long>(in.batch_size),
                   in.batch_size == 1 ? "" : "s");
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
  if (!any_refuses) return plan;
  if (skip_requested()) {
    if (rank0)
      std::fprintf(stderr, "wick: warning: %s\nwick: warning: WICK_SKIP_MEMORY_CHECK is set: running anyway\n",
                   refusal ? refusal->c_str() : "another rank's device cannot fit the run");
    return plan;
  }
  WICK_FAIL(Config, refusal ? *refusal
                            : std::string("another rank's device cannot fit the run (its message names "
                                          "the numbers); WICK_SKIP_MEMORY_CHECK=1 runs anyway"));
}

}  // namespace wick
