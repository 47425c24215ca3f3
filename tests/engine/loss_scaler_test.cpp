// Dynamic fp16 loss scaling: unscaling, the non-finite check, halving on overflow with skip
// counting, growth after growth_interval clean steps, the loss gradient, state save/restore.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "engine/autograd/backward.h"
#include "engine/autograd/node.h"
#include "engine/optim/loss_scaler.h"
#include "engine/optim/optimizer.h"

namespace wick {
namespace {

using autograd::GradientStore;
using ::testing::HasSubstr;

TEST(LossScaler, UnscalesGradientsAndReportsFinite) {
  LossScaler scaler;
  EXPECT_EQ(scaler.scale(), 65536.0);
  Tensor a = Tensor::from_vector<float>({1, 2}, {2}), b = Tensor::from_vector<float>({1, 2, 3}, {3}).to(DType::BF16);
  GradientStore store;
  store.add(a, Tensor::from_vector<float>({65536.0f * 1.5f, -65536.0f * 2.0f}, {2}), true);
  store.add(b, Tensor::from_vector<float>({65536.0f * 0.25f, 0.0f, 3.0f}, {3}), true);
  EXPECT_TRUE(scaler.unscale_and_check(store));
  EXPECT_EQ(store.get(a).to_vector<float>(), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(store.get(b).to_vector<float>(), (std::vector<float>{0.25f, 0.0f, 3.0f / 65536.0f}));
}

TEST(LossScaler, DetectsNanAndInf) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    LossScaler scaler;
    Tensor a = Tensor::from_vector<float>({1, 2}, {2}), b = Tensor::from_vector<float>({1, 2, 3}, {3});
    GradientStore store;
    store.add(a, Tensor::from_vector<float>({1, 1}, {2}), true);
    store.add(b, Tensor::from_vector<float>({1, bad, 1}, {3}), true);
    EXPECT_FALSE(scaler.unscale_and_check(store)) << bad;
  }
  // Large finite values whose sum would overflow f32 are still finite.
  LossScaler scaler({.initial_scale = 1.0});
  Tensor c = Tensor::from_vector<float>({1, 2, 3}, {3});
  GradientStore store;
  store.add(c, Tensor::from_vector<float>({3e38f, 3e38f, 3e38f}, {3}), true);
  EXPECT_TRUE(scaler.unscale_and_check(store));
}

TEST(LossScaler, HalvesOnOverflowAndCountsSkippedSteps) {
  LossScaler scaler;
  scaler.update(true);
  scaler.update(true);
  EXPECT_EQ(scaler.growth_tracker(), 2);
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), 32768.0);
  EXPECT_EQ(scaler.n_skipped(), 1);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), 16384.0);
  EXPECT_EQ(scaler.n_skipped(), 2);
}

TEST(LossScaler, GrowsAfterGrowthIntervalCleanSteps) {
  LossScaler scaler;  // growth_interval 2000
  for (int i = 0; i < 1999; ++i) scaler.update(true);
  EXPECT_EQ(scaler.scale(), 65536.0);
  EXPECT_EQ(scaler.growth_tracker(), 1999);
  scaler.update(true);
  EXPECT_EQ(scaler.scale(), 131072.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);

  LossScaler small({.initial_scale = 8.0, .growth_interval = 3});
  small.update(true);
  small.update(true);
  small.update(false);  // resets the count: 4
  small.update(true);
  small.update(true);
  EXPECT_EQ(small.scale(), 4.0);
  small.update(true);
  EXPECT_EQ(small.scale(), 8.0);
  EXPECT_EQ(small.n_skipped(), 1);
}

TEST(LossScaler, LossGradientIsTheScale) {
  LossScaler scaler({.initial_scale = 1024.0});
  Tensor loss = Tensor::scalar(0.5, DType::F16);
  Tensor g = scaler.loss_gradient(loss);
  EXPECT_EQ(g.dtype(), DType::F16);
  EXPECT_EQ(g.shape(), loss.shape());
  EXPECT_EQ(g.item(), 1024.0);
}

TEST(LossScaler, SkipsOptimizerStepsOnOverflow) {
  // The fp16 loop: a non-finite step leaves the parameter and the optimizer's step count alone.
  Tensor w = Tensor::from_vector<float>({1, 2}, {2}).to(DType::F16);
  autograd::set_requires_grad(w, true, "w");
  auto optimizer = make_optimizer("adamw", {{"w", w}}, {});
  LossScaler scaler({.initial_scale = 4.0});
  std::vector<float> gradients[] = {{4, 4}, {std::numeric_limits<float>::infinity(), 4}, {4, -4}};
  std::vector<float> before;
  for (const auto& g : gradients) {
    GradientStore store;
    store.add(w, Tensor::from_vector<float>(g, {2}), true);
    before = w.to_vector<float>();
    bool finite = scaler.unscale_and_check(store);
    if (finite) optimizer->step(store, 1e-2f);
    scaler.update(finite);
    if (!finite) {
      EXPECT_EQ(w.to_vector<float>(), before);
    }
  }
  EXPECT_EQ(optimizer->steps_taken(), 2);
  EXPECT_EQ(scaler.n_skipped(), 1);
  EXPECT_EQ(scaler.scale(), 2.0);
}

TEST(LossScaler, StateRoundTrip) {
  LossScaler scaler({.initial_scale = 256.0, .growth_interval = 5});
  scaler.update(false);
  scaler.update(true);
  scaler.update(true);
  LossScaler restored({.initial_scale = 256.0, .growth_interval = 5});
  restored.load_state(scaler.state_tensors());
  EXPECT_EQ(restored.scale(), 128.0);
  EXPECT_EQ(restored.growth_tracker(), 2);
  EXPECT_EQ(restored.n_skipped(), 1);
  for (int i = 0; i < 3; ++i) {
    scaler.update(true);
    restored.update(true);
  }
  EXPECT_EQ(restored.scale(), 256.0);
  EXPECT_EQ(restored.scale(), scaler.scale());

  auto message = [&](std::vector<std::pair<std::string, Tensor>> tensors) -> std::string {
    try {
      restored.load_state(tensors);
    } catch (const WickError& e) {
      return e.what();
    }
    return "(no error)";
  };
  auto state = scaler.state_tensors();
  EXPECT_THAT(message({state[0], state[1]}), HasSubstr("LossScaler::load_state"));
  EXPECT_THAT(message({state[0], state[1], {"skipped", state[2].second}}), HasSubstr("n_skipped"));
  EXPECT_THAT(message({{"scale", Tensor::scalar(2.0, DType::F32)}, state[1], state[2]}), HasSubstr("f64"));
  EXPECT_THAT(message({{"scale", Tensor::scalar(-2.0, DType::F64)}, state[1], state[2]}), HasSubstr("scale"));
  EXPECT_THROW(LossScaler({.backoff_factor = 1.5}), WickError);
}

}  // namespace
}  // namespace wick
