#include "models/memory/memory_plan.h"

#include <algorithm>
#include <cstdio>

#include "models/weights/float8_weights.h"
#include "runtime/error.h"

namespace wick {
namespace {

struct Candidate {
  bool checkpointing = false, float8 = false;
  int64_t swap = 0;
  bool shard = false;
  bool shard_by_plan = false;  // sharding the plan turned on (dropped again where it does not lower the estimate)
};

// The candidates the choices allow, cheapest first (memory_plan.h). Sharding the weights is free to choose only
// over several ranks (one rank would keep every shard).
std::vector<Candidate> candidates(const PlanChoices& c, int64_t n_blocks, int world_size) {
  const bool ckpt_free = !c.gradient_checkpointing, f8_free = !c.float8, swap_free = !c.blocks_to_swap;
  const bool shard_free = !c.shard_weights && world_size > 1 && n_blocks > 0;
  const bool ckpt = c.gradient_checkpointing.value_or(false), f8 = c.float8.value_or(false);
  const int64_t swap = c.blocks_to_swap.value_or(0);
  const bool shard = c.shard_weights.value_or(false);
  std::vector<Candidate> out = {{ckpt, f8, swap, shard}};
  if (ckpt_free) out.push_back({true, f8, swap, shard});
  const bool ckpt_on = ckpt || ckpt_free;
  const bool by_plan = shard_free && ckpt_on;
  if (by_plan) out.push_back({true, f8, swap, true, true});
  const bool shard_on = shard || by_plan;
  if (f8_free && n_blocks > 0) out.push_back({ckpt_on, true, swap, shard_on, by_plan});
  if (swap_free && ckpt_on)
    for (int64_t n = 1; n <= n_blocks; ++n) out.push_back({true, f8 || f8_free, n, shard_on, by_plan});
  // Without checkpointing backward keeps the swapped copies and the gathered blocks: a fixed swap count, or fixed
  // sharding, needs it.
  std::erase_if(out, [](const Candidate& k) { return (k.swap > 0 || k.shard) && !k.checkpointing; });
  return out;
}

// Step time with checkpointing over the time without: a step is about three forwards' worth (forward,
// and backward at twice its cost); checkpointing reruns the blocks' forward. From the activation
// profile's forward FLOPs where the architecture counts them (Flux), else 4/3.
double checkpointing_slowdown(const DiffusionModel& model, const MemoryInputs& in) {
  const ActivationProfile profile = model.activation_profile(
      {.batch = in.batch_size, .latent_height = in.latent_height, .latent_width = in.latent_width,
       .text_length = in.text_length, .dtype = model.dtype(), .device = in.device},
      true);
  const std::vector<std::string> blocks = model.block_paths();
  int64_t recomputed = 0;
  for (const ActivationSegment& s : profile.segments)
    if (std::find(blocks.begin(), blocks.end(), s.name) != blocks.end()) recomputed += s.forward_flops;
  const int64_t total = profile.forward_flops();
  if (total <= 0 || recomputed <= 0) return 4.0 / 3.0;
  return 1.0 + static_cast<double>(recomputed) / (3.0 * static_cast<double>(total));
}

}  // namespace

PlanChoices choices_of(const TrainConfig& config) {
  PlanChoices c;
  if (!config.train.gradient_checkpointing_auto || config.train.gradient_checkpointing)
    c.gradient_checkpointing = config.train.gradient_checkpointing;
  if (config.model.quantize != QuantizeMode::Auto) c.float8 = config.model.quantize == QuantizeMode::Float8;
  if (config.train.blocks_to_swap >= 0) c.blocks_to_swap = config.train.blocks_to_swap;
  if (!config.distributed.shard_auto) c.shard_weights = config.distributed.shard_weights;
  if (config.network.type == NetworkType::Full) {  // every weight trains: nothing frozen to quantize, stream or shard
    if (!c.float8) c.float8 = false;
    if (!c.blocks_to_swap) c.blocks_to_swap = 0;
    if (!c.shard_weights) c.shard_weights = false;
  }
  return c;
}

MemoryPlan plan_memory(const DiffusionModel& model, const MemoryInputs& inputs, const PlanChoices& choices,
                       int64_t budget, const std::string& budget_source) {
  WICK_CHECK(budget > 0, "plan_memory: the budget must be positive, got ", budget);
  const auto n_blocks = static_cast<int64_t>(model.block_paths().size());
  PlanChoices c = choices;
  if (has_float8_layers(model)) c.float8 = true;  // a float8 file stays float8
  MemoryPlan best;
  bool have = false;
  // Sharding saves the blocks' weights but adds two gathered blocks' buffers: with few blocks or ranks it can cost
  // more than it saves, and then the plan goes on without it.
  std::optional<bool> shard_helps;
  int64_t previous_total = 0;
  for (Candidate k : candidates(c, n_blocks, inputs.world_size)) {
    if (k.shard_by_plan && shard_helps == false) k.shard = false;
    MemoryInputs in = inputs;
    in.gradient_checkpointing = k.checkpointing;
    in.float8 = k.float8;
    in.blocks_to_swap = k.swap;
    in.shard_weights = k.shard;
    MemoryPlan plan{.gradient_checkpointing = k.checkpointing, .float8 = k.float8, .blocks_to_swap = k.swap,
                    .shard_weights = k.shard, .world_size = inputs.world_size, .estimate = estimate_training_memory(model, in), .budget = budget,
                    .fits = false, .budget_source = budget_source};
    plan.fits = plan.estimate.total <= budget;
    if (k.shard_by_plan && !shard_helps) {
      shard_helps = plan.estimate.total < previous_total;
      if (!*shard_helps) continue;
    }
    previous_total = plan.estimate.total;
    if (k.checkpointing && !c.gradient_checkpointing.value_or(false))
      plan.slowdown = checkpointing_slowdown(model, inputs);
    plan.bytes_streamed_per_step = 2 * plan.estimate.swapped_weights * inputs.gradient_accumulation;
    if (k.shard)
      plan.bytes_gathered_per_step = 2 * (plan.estimate.sharded_weights -
                                          plan.estimate.sharded_weights / std::max(1, plan.estimate.shard_ranks)) *
                                     inputs.gradient_accumulation;
    if (plan.fits) return plan;
    if (!have || plan.estimate.total < best.estimate.total) best = plan, have = true;
  }
  return best;
}

std::string describe(const MemoryPlan& p) {
  std::string line = "wick train: memory plan: gradient checkpointing ";
  line += p.gradient_checkpointing ? "on" : "off";
  line += std::string(", frozen base ") + (p.float8 ? "float8 e4m3" : "unquantized");
  line += ", " + std::to_string(p.blocks_to_swap) + " blocks swapped";
  if (p.shard_weights) line += ", the blocks' weights sharded over " + std::to_string(p.estimate.shard_ranks) + " ranks";
  line += "; expected peak " + format_bytes(p.estimate.total) + " of the " + format_bytes(p.budget) + " " +
          p.budget_source;
  char slowdown[64];
  std::snprintf(slowdown, sizeof slowdown, "%.2fx", p.slowdown);
  line += std::string("; expected step time ") + slowdown + " the plain run's";
  if (p.slowdown > 1.0) line += " (checkpointing reruns each block's forward in backward)";
  if (p.float8) line += ", plus the float8 dequantization (unmeasured)";
  if (p.blocks_to_swap > 0)
    line += ", plus " + format_bytes(p.bytes_streamed_per_step) +
            " host-to-device copies per step (overlapped with compute on a GPU; the overlap is unmeasured)";
  if (p.shard_weights)
    line += ", plus " + format_bytes(p.bytes_gathered_per_step) + " received per step by each rank's gathers";
  return line;
}

std::string refusal(const MemoryPlan& p, const PlanChoices& c) {
  std::string message = "no memory plan fits the " + format_bytes(p.budget) + " " + p.budget_source +
                        ": the smallest estimate, with gradient checkpointing " +
                        (p.gradient_checkpointing ? "on" : "off") + ", the base " +
                        (p.float8 ? "float8" : "unquantized") + " and " + std::to_string(p.blocks_to_swap) +
                        " blocks swapped, is " + format_bytes(p.estimate.total) + " (" + describe(p.estimate) + ")";
  std::string fixed;
  if (c.gradient_checkpointing) fixed += " train.gradient_checkpointing,";
  if (c.float8) fixed += " model.quantize,";
  if (c.blocks_to_swap) fixed += " train.blocks_to_swap,";
  if (c.shard_weights && !*c.shard_weights && p.world_size > 1) fixed += " distributed.shard,";
  if (!fixed.empty()) {
    fixed.pop_back();
    message += ". The config fixes" + fixed + ": set them to auto to let the plan choose";
  }
  message += ". Lower train.batch_size, the resolution or network.linear, or raise the budget";
  return message;
}

TrainConfig with_plan(const TrainConfig& config, const MemoryPlan& plan) {
  TrainConfig out = config;
  out.train.gradient_checkpointing = plan.gradient_checkpointing;
  out.train.gradient_checkpointing_auto = false;
  if (out.model.quantize == QuantizeMode::Auto)
    out.model.quantize = plan.float8 ? QuantizeMode::Float8 : QuantizeMode::None;
  out.train.blocks_to_swap = plan.blocks_to_swap;
  if (out.distributed.shard_auto) {
    out.distributed.shard_auto = false;
    out.distributed.shard_weights = plan.shard_weights;
  }
  return out;
}

}  // namespace wick
