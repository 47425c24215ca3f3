// Gradient buckets (engine/distributed/gradient_buckets.h) on the group wick_comm_tests runs in: the
// flat gradient after finish() equals the mean over ranks of every rank's own gradient, computed here
// on each rank from every rank's data (all ranks build the same model from the same seed); buckets
// start during backward; accumulation reduces only on the armed micro-step; a parameter without a
// gradient is reduced as zeros; after step_reduced the parameters are bitwise equal on every rank.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/autograd/backward.h"
#include "engine/autograd/node.h"
#include "engine/autograd/ops_loss.h"
#include "engine/distributed/gradient_buckets.h"
#include "engine/init.h"
#include "engine/optim/optimizer.h"
#include "models/nn/linear.h"
#include "runtime/ops/random.h"
#include "tests/comm/test_group.h"

using namespace wick;

namespace {

struct Net {
  std::shared_ptr<nn::Linear> fc1, fc2, unused;
  Tensor forward(const Tensor& x) const { return fc2->forward(fc1->forward(x)); }
  NamedParameters parameters(bool with_unused = true) const {
    NamedParameters out;
    for (auto& [name, t] : fc1->named_parameters()) out.emplace_back("fc1." + name, t);
    for (auto& [name, t] : fc2->named_parameters()) out.emplace_back("fc2." + name, t);
    if (with_unused)
      for (auto& [name, t] : unused->named_parameters()) out.emplace_back("unused." + name, t);
    return out;
  }
};

Net make_net() {
  set_init_seed(11);
  return {std::make_shared<nn::Linear>(48, 96), std::make_shared<nn::Linear>(96, 40),
          std::make_shared<nn::Linear>(8, 8)};
}

Tensor loss_of(const Net& net, int rank, int micro) {
  uint64_t sample = static_cast<uint64_t>(rank * 16 + micro);
  Tensor x = randn({6, 48}, derive_stream(5, sample, 0, RngPurpose::Test));
  Tensor y = randn({6, 40}, derive_stream(6, sample, 0, RngPurpose::Test));
  return autograd::mse_loss(net.forward(x), y);
}

// Mean over ranks of the per-rank gradients (summed over `micros` micro-steps), per parameter.
std::map<std::string, std::vector<double>> expected_gradients(const Net& net, int world, int micros) {
  std::map<std::string, std::vector<double>> mean;
  for (int r = 0; r < world; ++r) {
    autograd::GradientStore store;
    for (int m = 0; m < micros; ++m)
      autograd::backward(loss_of(net, r, m), store, m == 0 ? autograd::GradientMode::Overwrite
                                                           : autograd::GradientMode::Accumulate,
                         Tensor(), /*fire_hooks=*/false);
    for (const auto& [name, tensor] : net.parameters()) {
      std::vector<double>& acc = mean[name];
      acc.resize(static_cast<size_t>(tensor.numel()), 0.0);
      Tensor g = store.get(tensor);
      if (!g.defined()) continue;
      std::vector<double> values = g.to_vector<double>();
      for (size_t i = 0; i < acc.size(); ++i) acc[i] += values[i] / world;
    }
  }
  return mean;
}

void expect_close(const Optimizer& optimizer, const std::map<std::string, std::vector<double>>& want) {
  for (const ParameterSlot& slot : optimizer.parameters()) {
    std::vector<double> got = slot.grad.to_vector<double>();
    const std::vector<double>& ref = want.at(slot.name);
    ASSERT_EQ(got.size(), ref.size());
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - ref[i]) / (std::fabs(ref[i]) + 1e-6));
    EXPECT_LT(worst, 1e-4) << slot.name << " on " << g_group->describe();
  }
}

}  // namespace

TEST(GradientBuckets, FlatGradientIsTheMeanOverRanksAndBucketsStartInBackward) {
  Net net = make_net();
  auto optimizer = make_optimizer("adamw", net.parameters(/*with_unused=*/false), {.weight_decay = 0.0f});
  GradientBuckets buckets(*optimizer, *g_group, /*bucket_bytes=*/4096);
  ASSERT_GE(buckets.n_buckets(), 3);  // fc1.weight alone is 18 KB
  EXPECT_EQ(buckets.bucket_range(0).first, 0);
  EXPECT_EQ(buckets.bucket_range(buckets.n_buckets() - 1).second, optimizer->flat_numel());

  autograd::GradientStore store;
  buckets.arm(true);
  autograd::backward(loss_of(net, g_group->rank(), 0), store);
  BucketReport report = buckets.finish(store);
  EXPECT_EQ(report.n_missing, 0);
  EXPECT_GE(report.n_launched_during_backward, 2) << "no bucket started before backward ended";
  expect_close(*optimizer, expected_gradients(net, g_group->size(), 1));

  // One step: the same update on every rank.
  StepReport step = optimizer->step_reduced(1e-2f, report.n_missing);
  EXPECT_EQ(step.n_missing, 0);
  for (const auto& [name, tensor] : net.parameters()) {
    Tensor mine = tensor.clone(), root = tensor.clone();
    g_group->broadcast(root, 0);
    std::vector<float> a = mine.to_vector<float>(), b = root.to_vector<float>();
    EXPECT_EQ(a, b) << name << " differs from rank 0's after the step on " << g_group->describe();
  }
}

TEST(GradientBuckets, AccumulationReducesOnlyTheArmedMicroStep) {
  Net net = make_net();
  // Without the unused layer: a bucket holding a parameter that gets no gradient can only start in
  // finish(), and here the single bucket must start inside the armed backward.
  auto optimizer = make_optimizer("sgd", net.parameters(/*with_unused=*/false), {.weight_decay = 0.0f});
  GradientBuckets buckets(*optimizer, *g_group, /*bucket_bytes=*/1 << 20);  // one bucket
  EXPECT_EQ(buckets.n_buckets(), 1);
  autograd::GradientStore store;
  for (int m = 0; m < 3; ++m) {
    buckets.arm(m == 2);
    autograd::backward(loss_of(net, g_group->rank(), m), store,
                       m == 0 ? autograd::GradientMode::Overwrite : autograd::GradientMode::Accumulate);
  }
  BucketReport report = buckets.finish(store);
  EXPECT_EQ(report.n_launched_during_backward, 1);
  expect_close(*optimizer, expected_gradients(net, g_group->size(), 3));

  // Not armed at all: finish() takes everything from the store.
  autograd::GradientStore again;
  buckets.arm(false);
  autograd::backward(loss_of(net, g_group->rank(), 0), again);
  report = buckets.finish(again);
  EXPECT_EQ(report.n_launched_during_backward, 0);
  expect_close(*optimizer, expected_gradients(net, g_group->size(), 1));
}

TEST(GradientBuckets, ParametersWithoutGradientsAreReducedAsZerosInFinish) {
  Net net = make_net();
  auto optimizer = make_optimizer("adamw", net.parameters(), {.weight_decay = 0.0f});
  GradientBuckets buckets(*optimizer, *g_group, /*bucket_bytes=*/4096);
  autograd::GradientStore store;
  buckets.arm(true);
  autograd::backward(loss_of(net, g_group->rank(), 0), store);
  BucketReport report = buckets.finish(store);
  EXPECT_EQ(report.n_missing, 2);  // unused.weight, unused.bias
  // The last bucket (launched first) holds the unused layer: nothing can start before finish().
  EXPECT_EQ(report.n_launched_during_backward, 0);
  expect_close(*optimizer, expected_gradients(net, g_group->size(), 1));
}

TEST(GradientBuckets, RejectsBadArguments) {
  Net net = make_net();
  auto optimizer = make_optimizer("sgd", net.parameters());
  EXPECT_THROW(GradientBuckets(*optimizer, *g_group, 0), WickError);
}
