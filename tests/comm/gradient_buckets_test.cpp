// Gradient buckets (engine/distributed/gradient_buckets.h) on the group wick_comm_tests runs in: the
// flat gradient after finish() equals the mean over ranks of every rank's own gradient, computed here
// on each rank from every rank's data (all ranks build the same model from the same seed); buckets
// start during backward; accumulation reduces only on the armed micro-step; a parameter without a
// gradient is reduced as zeros; after step_reduced the parameters are bitwise equal on every rank.
// With a sharded optimizer (ZeRO-1) the buckets reduce-scatter: the owned range of the flat gradient
// is the mean, buckets straddling the ranks' ranges included.
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
#include "engine/checkpoint/optimizer_shards.h"
#include "engine/distributed/gradient_buckets.h"
#include "engine/distributed/zero.h"
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

// The flat gradient against the mean, over the optimizer's owned range (all of it unless sharded);
// returns the number of elements compared.
int64_t expect_close(const Optimizer& optimizer, const std::map<std::string, std::vector<double>>& want) {
  auto [begin, end] = optimizer.owned_range();
  int64_t n_compared = 0;
  for (const ParameterSlot& slot : optimizer.parameters()) {
    std::vector<double> got = slot.grad.to_vector<double>();
    const std::vector<double>& ref = want.at(slot.name);
    EXPECT_EQ(got.size(), ref.size());
    if (got.size() != ref.size()) return n_compared;
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      int64_t flat = slot.offset + static_cast<int64_t>(i);
      if (flat < begin || flat >= end) continue;
      worst = std::max(worst, std::fabs(got[i] - ref[i]) / (std::fabs(ref[i]) + 1e-6));
      ++n_compared;
    }
    EXPECT_LT(worst, 1e-4) << slot.name << " on " << g_group->describe();
  }
  return n_compared;
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

TEST(GradientBuckets, ShardedOptimizerGetsTheMeanInItsRangeByReduceScatter) {
  const int world = g_group->size();
  // 4 KB buckets (several, some inside one rank's range, some straddling) and one bucket holding
  // everything (straddling every boundary between ranks).
  for (int64_t bucket_bytes : {int64_t{4096}, int64_t{1} << 20}) {
    SCOPED_TRACE(bucket_bytes);
    Net net = make_net();
    auto optimizer = make_optimizer("adamw", net.parameters(), {.weight_decay = 0.0f, .max_grad_norm = 1.0f});
    shard_optimizer(*optimizer, *g_group);
    GradientBuckets buckets(*optimizer, *g_group, bucket_bytes);
    EXPECT_EQ(buckets.reduce_scatters(), world > 1);
    std::vector<FlatRange> ranges = zero_partition(optimizer->flat_numel(), world);
    int64_t n_straddling = 0;
    for (int64_t b = 0; b < buckets.n_buckets(); ++b)
      for (const FlatRange& range : ranges)
        if (buckets.bucket_range(b).first < range.begin && range.begin < buckets.bucket_range(b).second) ++n_straddling;
    if (world > 1) {
      EXPECT_GE(n_straddling, 1) << "no bucket crosses a boundary between ranks";
    }

    autograd::GradientStore store;
    buckets.arm(true);
    autograd::backward(loss_of(net, g_group->rank(), 0), store);
    BucketReport report = buckets.finish(store);
    EXPECT_EQ(report.n_missing, 2);
    auto [begin, end] = optimizer->owned_range();
    EXPECT_EQ(expect_close(*optimizer, expected_gradients(net, world, 1)), [&] {
      int64_t n = 0;  // every parameter element of the owned range was compared
      for (const ParameterSlot& slot : optimizer->parameters())
        n += std::max<int64_t>(0, std::min(end, slot.offset + slot.numel) - std::max(begin, slot.offset));
      return n;
    }());

    // A step: every rank ends with the same parameters (the masters are all-gathered).
    StepReport step = optimizer->step_reduced(1e-2f, report.n_missing);
    EXPECT_TRUE(std::isfinite(step.grad_norm));
    for (const auto& [name, tensor] : net.parameters()) {
      Tensor mine = tensor.clone(), root = tensor.clone();
      g_group->broadcast(root, 0);
      EXPECT_EQ(mine.to_vector<float>(), root.to_vector<float>()) << name << " on " << g_group->describe();
    }
  }
}

TEST(GradientBuckets, ShardingAfterTheBucketsWereMadeIsRefused) {
  if (g_group->size() == 1) GTEST_SKIP() << "the single group: shard_optimizer is a no-op";
  Net net = make_net();
  auto optimizer = make_optimizer("sgd", net.parameters());
  GradientBuckets buckets(*optimizer, *g_group, 4096);
  shard_optimizer(*optimizer, *g_group);
  try {
    buckets.arm(true);
    FAIL() << "no error";
  } catch (const WickError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("call shard_optimizer before"));
  }
}

TEST(GradientBuckets, RejectsBadArguments) {
  Net net = make_net();
  auto optimizer = make_optimizer("sgd", net.parameters());
  EXPECT_THROW(GradientBuckets(*optimizer, *g_group, 0), WickError);
}
