// Learning-rate schedules against values worked out by hand from diffusers' formulas
// (diffusers/optimization.py; transformers' min_lr variant of the cosine schedule).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "engine/optim/lr_schedule.h"
#include "runtime/error.h"

namespace wick {
namespace {

using ::testing::HasSubstr;

struct ScheduleCase {
  LrScheduleConfig config;
  int64_t step;
  double expected_multiplier;
};

class LrScheduleValues : public ::testing::TestWithParam<ScheduleCase> {};

TEST_P(LrScheduleValues, MatchHandComputedValues) {
  const ScheduleCase& c = GetParam();
  LrSchedule schedule = make_lr_schedule(c.config);
  EXPECT_NEAR(schedule.multiplier_at(c.step), c.expected_multiplier, 1e-12)
      << c.config.name << " at step " << c.step;
  EXPECT_NEAR(schedule.lr_at(c.step), c.config.base_lr * c.expected_multiplier, 1e-12 * c.config.base_lr);
}

LrScheduleConfig cfg(const std::string& name, int64_t warmup, int64_t total, double min_lr = 0.0,
                     double num_cycles = -1.0) {
  return {.name = name, .base_lr = 1e-4, .warmup_steps = warmup, .total_steps = total, .min_lr = min_lr,
          .num_cycles = num_cycles};
}

LrScheduleConfig polynomial_cfg() {
  return {.name = "polynomial", .base_lr = 1e-3, .warmup_steps = 0, .total_steps = 100, .power = 2.0, .lr_end = 1e-7};
}

INSTANTIATE_TEST_SUITE_P(
    LrSchedule, LrScheduleValues,
    ::testing::Values(
        // constant: 1 everywhere.
        ScheduleCase{cfg("constant", 0, 0), 0, 1.0}, ScheduleCase{cfg("constant", 0, 0), 12345, 1.0},
        // constant_with_warmup, W = 10: step / 10 below W, then 1.
        ScheduleCase{cfg("constant_with_warmup", 10, 0), 0, 0.0},
        ScheduleCase{cfg("constant_with_warmup", 10, 0), 3, 0.3},
        ScheduleCase{cfg("constant_with_warmup", 10, 0), 10, 1.0},
        ScheduleCase{cfg("constant_with_warmup", 10, 0), 500, 1.0}, ScheduleCase{cfg("warmup", 4, 0), 1, 0.25},
        ScheduleCase{cfg("warmup", 4, 0), 4, 1.0},
        // linear, W = 10, T = 110: warmup, then (110 − step) / 100, floored at 0.
        ScheduleCase{cfg("linear", 10, 110), 5, 0.5}, ScheduleCase{cfg("linear", 10, 110), 10, 1.0},
        ScheduleCase{cfg("linear", 10, 110), 60, 0.5}, ScheduleCase{cfg("linear", 10, 110), 85, 0.25},
        ScheduleCase{cfg("linear", 10, 110), 110, 0.0}, ScheduleCase{cfg("linear", 10, 110), 200, 0.0},
        ScheduleCase{cfg("linear", 0, 4), 0, 1.0}, ScheduleCase{cfg("linear", 0, 4), 1, 0.75},
        // cosine, W = 10, T = 110: progress p = (step − 10) / 100, 0.5·(1 + cos(π·p)).
        ScheduleCase{cfg("cosine", 10, 110), 2, 0.2}, ScheduleCase{cfg("cosine", 10, 110), 10, 1.0},
        ScheduleCase{cfg("cosine", 10, 110), 35, 0.85355339059327373},  // p = 1/4: (1 + √2/2) / 2
        ScheduleCase{cfg("cosine", 10, 110), 60, 0.5}, ScheduleCase{cfg("cosine", 10, 110), 85, 0.14644660940672624},
        ScheduleCase{cfg("cosine", 10, 110), 110, 0.0},
        // cosine to min_lr = 1e-5 (rate 0.1): f·0.9 + 0.1.
        ScheduleCase{cfg("cosine", 10, 110, 1e-5), 60, 0.55}, ScheduleCase{cfg("cosine", 10, 110, 1e-5), 110, 0.1},
        ScheduleCase{cfg("cosine", 10, 110, 1e-5), 5, 0.5},
        // cosine_with_restarts, 2 cycles over T = 100: 0.5·(1 + cos(π·((2p) mod 1))), 0 from p = 1.
        ScheduleCase{cfg("cosine_with_restarts", 0, 100, 0.0, 2.0), 25, 0.5},
        ScheduleCase{cfg("cosine_with_restarts", 0, 100, 0.0, 2.0), 50, 1.0},
        ScheduleCase{cfg("cosine_with_restarts", 0, 100, 0.0, 2.0), 75, 0.5},
        ScheduleCase{cfg("cosine_with_restarts", 0, 100, 0.0, 2.0), 100, 0.0},
        // polynomial, lr 1e-3 → 1e-7, power 2, T = 100: ((lr − end)·(1 − step/100)² + end) / lr.
        ScheduleCase{polynomial_cfg(), 0, 1.0}, ScheduleCase{polynomial_cfg(), 50, (0.25 * (1e-3 - 1e-7) + 1e-7) / 1e-3},
        ScheduleCase{polynomial_cfg(), 100, 1e-4}, ScheduleCase{polynomial_cfg(), 150, 1e-4}));

TEST(LrSchedule, UnknownNameListsValidNames) {
  try {
    make_lr_schedule({.name = "cosine_annealing"});
    FAIL() << "no error";
  } catch (const WickError& e) {
    EXPECT_THAT(e.what(), HasSubstr("cosine_annealing"));
    EXPECT_THAT(e.what(), HasSubstr("constant, constant_with_warmup, cosine, cosine_with_restarts, linear, "
                                    "polynomial, warmup"));
  }
}

TEST(LrSchedule, RejectsBadConfigs) {
  auto message = [](const LrScheduleConfig& config) -> std::string {
    try {
      make_lr_schedule(config);
    } catch (const WickError& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_THAT(message({.name = "cosine", .total_steps = 0}), HasSubstr("total_steps"));
  EXPECT_THAT(message({.name = "linear", .total_steps = -5}), HasSubstr("total_steps"));
  EXPECT_THAT(message({.name = "constant", .warmup_steps = -1}), HasSubstr("warmup_steps"));
  EXPECT_THAT(message({.name = "constant", .base_lr = -1.0}), HasSubstr("base_lr"));
  EXPECT_THAT(message({.name = "cosine", .base_lr = 1e-4, .total_steps = 10, .min_lr = 1e-3}), HasSubstr("min_lr"));
  EXPECT_THAT(message({.name = "polynomial", .base_lr = 1e-8, .total_steps = 10}), HasSubstr("lr_end"));
  EXPECT_EQ(message({.name = "constant"}), "(no error)");
  LrSchedule schedule = make_lr_schedule({.name = "constant"});
  EXPECT_THROW(schedule.lr_at(-1), WickError);
}

}  // namespace
}  // namespace wick
