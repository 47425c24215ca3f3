#include "engine/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numbers>

#include "runtime/error.h"

namespace wick {
namespace {

double as_double(int64_t v) { return static_cast<double>(v); }

// step / max(1, W), the warmup ramp every schedule with warmup shares.
double warmup(const LrScheduleConfig& c, int64_t step) {
  return as_double(step) / as_double(std::max<int64_t>(1, c.warmup_steps));
}

// (step - W) / max(1, T - W)
double progress(const LrScheduleConfig& c, int64_t step) {
  return as_double(step - c.warmup_steps) / as_double(std::max<int64_t>(1, c.total_steps - c.warmup_steps));
}

double constant(const LrScheduleConfig&, int64_t) { return 1.0; }

double constant_with_warmup(const LrScheduleConfig& c, int64_t step) {
  return step < c.warmup_steps ? warmup(c, step) : 1.0;
}

// diffusers get_linear_schedule_with_warmup: max(0, (T - step) / max(1, T - W)).
double linear(const LrScheduleConfig& c, int64_t step) {
  if (step < c.warmup_steps) return warmup(c, step);
  return std::max(0.0, as_double(c.total_steps - step) /
                           as_double(std::max<int64_t>(1, c.total_steps - c.warmup_steps)));
}

// diffusers get_cosine_schedule_with_warmup: max(0, 0.5 (1 + cos(pi · cycles · 2 · progress))),
// with transformers' min_lr floor: f · (1 − min_lr/base_lr) + min_lr/base_lr.
double cosine(const LrScheduleConfig& c, int64_t step) {
  if (step < c.warmup_steps) return warmup(c, step);
  double cycles = c.num_cycles < 0.0 ? 0.5 : c.num_cycles;
  double factor = 0.5 * (1.0 + std::cos(std::numbers::pi * cycles * 2.0 * progress(c, step)));
  if (c.min_lr > 0.0) {
    double min_rate = c.min_lr / c.base_lr;
    factor = factor * (1.0 - min_rate) + min_rate;
  }
  return std::max(0.0, factor);
}

// diffusers get_cosine_with_hard_restarts_schedule_with_warmup.
double cosine_with_restarts(const LrScheduleConfig& c, int64_t step) {
  if (step < c.warmup_steps) return warmup(c, step);
  double p = progress(c, step);
  if (p >= 1.0) return 0.0;
  double cycles = c.num_cycles < 0.0 ? 1.0 : c.num_cycles;
  return std::max(0.0, 0.5 * (1.0 + std::cos(std::numbers::pi * std::fmod(cycles * p, 1.0))));
}

// diffusers get_polynomial_decay_schedule_with_warmup.
double polynomial(const LrScheduleConfig& c, int64_t step) {
  if (step < c.warmup_steps) return warmup(c, step);
  if (step > c.total_steps) return c.lr_end / c.base_lr;
  double lr_range = c.base_lr - c.lr_end;
  double decay_steps = as_double(c.total_steps - c.warmup_steps);
  double pct_remaining = 1.0 - as_double(step - c.warmup_steps) / decay_steps;
  return (lr_range * std::pow(pct_remaining, c.power) + c.lr_end) / c.base_lr;
}

struct Entry {
  double (*multiplier)(const LrScheduleConfig&, int64_t);
  bool needs_total_steps;
};

const std::map<std::string, Entry>& registry() {
  static const std::map<std::string, Entry> entries = {
      {"constant", {constant, false}},
      {"constant_with_warmup", {constant_with_warmup, false}},
      {"warmup", {constant_with_warmup, false}},
      {"linear", {linear, true}},
      {"cosine", {cosine, true}},
      {"cosine_with_restarts", {cosine_with_restarts, true}},
      {"polynomial", {polynomial, true}},
  };
  return entries;
}

std::string joined_names() {
  std::string out;
  for (const std::string& name : lr_schedule_names()) out += (out.empty() ? "" : ", ") + name;
  return out;
}

}  // namespace

std::vector<std::string> lr_schedule_names() {
  std::vector<std::string> names;
  for (const auto& [name, entry] : registry()) names.push_back(name);
  return names;
}

LrSchedule make_lr_schedule(const LrScheduleConfig& config) {
  auto found = registry().find(config.name);
  WICK_CHECK(found != registry().end(), "lr schedule: unknown name \"", config.name, "\"; valid names: ",
             joined_names());
  const char* name = config.name.c_str();
  WICK_CHECK(std::isfinite(config.base_lr) && config.base_lr >= 0.0, "lr schedule ", name,
             ": base_lr must be finite and >= 0, got ", config.base_lr);
  WICK_CHECK(config.warmup_steps >= 0, "lr schedule ", name, ": warmup_steps must be >= 0, got ",
             config.warmup_steps);
  if (found->second.needs_total_steps)
    WICK_CHECK(config.total_steps > 0, "lr schedule ", name, ": total_steps must be > 0 (the number of "
               "optimizer steps of the run), got ", config.total_steps);
  if (config.name == "cosine")
    WICK_CHECK(config.min_lr >= 0.0 && config.min_lr <= config.base_lr, "lr schedule cosine: min_lr must lie in "
               "[0, base_lr = ", config.base_lr, "], got ", config.min_lr);
  if (config.name == "polynomial") {
    WICK_CHECK(config.base_lr > config.lr_end, "lr schedule polynomial: lr_end (", config.lr_end,
               ") must be smaller than base_lr (", config.base_lr, ")");
    WICK_CHECK(config.total_steps > config.warmup_steps, "lr schedule polynomial: total_steps (",
               config.total_steps, ") must exceed warmup_steps (", config.warmup_steps, ")");
  }
  return LrSchedule(config, found->second.multiplier);
}

double LrSchedule::multiplier_at(int64_t step) const {
  WICK_CHECK(step >= 0, "lr schedule ", config_.name, ": step must be >= 0, got ", step);
  return multiplier_(config_, step);
}

double LrSchedule::lr_at(int64_t step) const { return config_.base_lr * multiplier_at(step); }

}  // namespace wick
