// Learning-rate schedules by name, with the formulas of diffusers' get_scheduler
// (diffusers/optimization.py, which wraps torch's LambdaLR).
//
//   LrSchedule schedule = make_lr_schedule({.name = "cosine", .base_lr = 1e-4, .warmup_steps = 500,
//                                           .total_steps = 10000});
//   for (int64_t step = 0; step < 10000; ++step) optimizer.step(grads, float(schedule.lr_at(step)));
//
// `step` counts optimizer steps already taken (0 for the first one), as LambdaLR's counter in the
// diffusers training scripts, which call lr_scheduler.step() after optimizer.step(): with warmup
// the first step runs at lr 0. Multiplier m(step), lr = base_lr * m(step); W = warmup_steps,
// T = total_steps, warmup part (step < W): step / max(1, W).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace wick {

struct LrScheduleConfig {
  // "constant", "constant_with_warmup" (alias "warmup"), "linear", "cosine",
  // "cosine_with_restarts", "polynomial".
  std::string name = "constant";
  double base_lr = 1e-4;
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;      // needed by linear, cosine, cosine_with_restarts, polynomial
  double min_lr = 0.0;          // cosine only: floor of the decay (transformers' min_lr); 0 = diffusers
  double num_cycles = -1.0;     // cosine: 0.5 (half a wave) when < 0; cosine_with_restarts: 1
  double power = 1.0;           // polynomial
  double lr_end = 1e-7;         // polynomial: the final lr
};

class LrSchedule {
 public:
  // The lr for the optimizer step that follows `step` completed steps (step >= 0).
  double lr_at(int64_t step) const;
  // lr_at(step) / base_lr (the LambdaLR lambda).
  double multiplier_at(int64_t step) const;
  const LrScheduleConfig& config() const { return config_; }

 private:
  friend LrSchedule make_lr_schedule(const LrScheduleConfig& config);
  using Multiplier = double (*)(const LrScheduleConfig&, int64_t step);
  LrSchedule(LrScheduleConfig config, Multiplier multiplier) : config_(std::move(config)), multiplier_(multiplier) {}

  LrScheduleConfig config_;
  Multiplier multiplier_ = nullptr;
};

// Builds the schedule named config.name; an unknown name throws listing the valid ones. Checks
// warmup_steps >= 0, base_lr >= 0, total_steps > 0 where the schedule needs it, 0 <= min_lr <= base_lr.
LrSchedule make_lr_schedule(const LrScheduleConfig& config);
// The registered names, sorted.
std::vector<std::string> lr_schedule_names();

}  // namespace wick
