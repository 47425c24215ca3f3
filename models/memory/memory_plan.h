// The memory plan of `wick train`: the settings left at auto (train.gradient_checkpointing,
// model.quantize, train.blocks_to_swap) chosen, and the ones set checked, so that the run's memory
// estimate (models/memory/memory_estimate.h) fits a budget (train.max_memory / --max-memory, else what the
// device has). docs/training.md "Memory".
//
//   MemoryPlan plan = plan_memory(*model, inputs, choices_of(config), budget);
//   std::fprintf(stderr, "%s\n", describe(plan).c_str());   // the choices, expected peak and slowdown
//   if (!plan.fits) WICK_FAIL(Config, refusal(plan));
//
// Candidates, cheapest first (each only where its settings are auto or set so): as configured with
// every auto setting off; gradient checkpointing; checkpointing + the blocks' weights sharded over the
// ranks (distributed.shard: auto, several ranks: exact, only traffic); then float8 base; then 1, 2, ...
// swapped blocks (each keeping the sharding where the plan turned it on). The first whose estimate fits the budget is the plan; none fitting, the
// plan is the one with the lowest estimate and fits is false.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/config/train_config.h"
#include "models/architecture.h"
#include "models/memory/memory_estimate.h"

namespace wick {

// What the config fixes (a value) or leaves to the plan (nullopt).
struct PlanChoices {
  std::optional<bool> gradient_checkpointing;
  std::optional<bool> float8;  // model.quantize float8 / none; a model already float8 counts as float8
  std::optional<int64_t> blocks_to_swap;
  std::optional<bool> shard_weights;  // distributed.shard weights / optimizer or none; auto: nullopt
};
PlanChoices choices_of(const TrainConfig& config);

struct MemoryPlan {
  bool gradient_checkpointing = false;
  bool float8 = false;
  int64_t blocks_to_swap = 0;
  bool shard_weights = false;
  int world_size = 1;
  MemoryEstimate estimate;  // of the chosen settings
  int64_t budget = 0;
  bool fits = false;
  std::string budget_source;  // "--max-memory / train.max_memory" or the device
  // Expected step time against the configuration with every auto setting off: checkpointing adds one
  // forward of each block (the blocks' forward FLOPs over the step's three forwards' worth, from the
  // activation profile; 4/3 where the architecture does not count FLOPs); float8 and swapping are not
  // in it (unmeasured: the dequantization and the copies overlap compute on a GPU).
  double slowdown = 1.0;
  int64_t bytes_streamed_per_step = 0;  // swapped blocks' frozen bytes copied per step (forward + recompute)
  int64_t bytes_gathered_per_step = 0;  // sharded: what each rank receives per step for the blocks' gathers
};

// `model` is built with the fixed settings and every auto one off (no float8 unless the file is, no
// swapper). `budget` in bytes (> 0).
MemoryPlan plan_memory(const DiffusionModel& model, const MemoryInputs& inputs, const PlanChoices& choices,
                       int64_t budget, const std::string& budget_source);

// "wick train: memory plan: ... expected peak X of the Y budget ...".
std::string describe(const MemoryPlan& plan);
// The Config error message of a plan that does not fit: the budget, the best estimate, what was fixed.
std::string refusal(const MemoryPlan& plan, const PlanChoices& choices);

// `config` with the plan's choices written in (they then read as set, so a resumed run repeats them).
TrainConfig with_plan(const TrainConfig& config, const MemoryPlan& plan);

}  // namespace wick
