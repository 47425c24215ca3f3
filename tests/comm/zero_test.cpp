// ZeRO-1 (engine/distributed/zero.h) on the group wick_comm_tests runs in: a sharded AdamW8bit takes
// bitwise the same steps as an unsharded one fed the same gradients, keeps about 1/world of the state,
// and its shards (one file per rank) merge into exactly the unsharded state and load back; with the
// gradient buckets reduce-scattering into the ranks' ranges, sharded SGD, AdamW and AdamW8bit steps
// with clipping active (and a NaN from one rank) equal the unsharded all-reduced ones bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <unistd.h>
#include <vector>

#include "engine/autograd/backward.h"
#include "engine/autograd/ops_loss.h"
#include "engine/checkpoint/optimizer_shards.h"
#include "engine/distributed/gradient_buckets.h"
#include "engine/distributed/zero.h"
#include "engine/init.h"
#include "engine/optim/optimizer.h"
#include "models/nn/linear.h"
#include "runtime/ops/copy.h"
#include "runtime/ops/random.h"
#include "tests/comm/test_group.h"

using namespace wick;

namespace {

// Two layers big enough for 8-bit state (>= 4096 elements) plus a small 32-bit one.
struct Net {
  std::shared_ptr<nn::Linear> fc1, fc2;
  NamedParameters parameters() const {
    NamedParameters out;
    for (auto& [name, t] : fc1->named_parameters()) out.emplace_back("fc1." + name, t);
    for (auto& [name, t] : fc2->named_parameters()) out.emplace_back("fc2." + name, t);
    return out;
  }
  Tensor forward(const Tensor& x) const { return fc2->forward(fc1->forward(x)); }
};

Net make_net() {
  set_init_seed(3);
  return {std::make_shared<nn::Linear>(64, 200), std::make_shared<nn::Linear>(200, 24)};
}

// The same gradients on every rank (every rank's data, averaged), as after an all-reduce.
autograd::GradientStore global_gradients(const Net& net, int world, int step) {
  autograd::GradientStore store;
  for (int r = 0; r < world; ++r) {
    uint64_t sample = static_cast<uint64_t>(step * 64 + r);
    Tensor x = randn({5, 64}, derive_stream(1, sample, 0, RngPurpose::Test));
    Tensor y = randn({5, 24}, derive_stream(2, sample, 0, RngPurpose::Test));
    Tensor loss = autograd::mse_loss(net.forward(x), y);
    autograd::backward(loss, store, r == 0 ? autograd::GradientMode::Overwrite : autograd::GradientMode::Accumulate,
                       Tensor(), false);
  }
  return store;
}

std::vector<float> values(const Tensor& t) { return t.to(DType::F32).to_vector<float>(); }

uint32_t bits(float x) {
  uint32_t b = 0;
  std::memcpy(&b, &x, sizeof(b));
  return b;
}

// Trainable 1-d parameters of the given sizes and dtypes, the same values on every rank.
NamedParameters exact_parameters(const std::vector<std::pair<int64_t, DType>>& specs) {
  NamedParameters out;
  for (size_t k = 0; k < specs.size(); ++k) {
    const auto [n, dtype] = specs[k];
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      v[static_cast<size_t>(i)] = static_cast<float>((i * 13 + static_cast<int64_t>(k) * 7) % 17 - 8) * 0.0625f;
    Tensor t = Tensor::from_vector<float>(v, {n}).to(dtype);
    std::string name = "p";
    name += std::to_string(k);
    autograd::set_requires_grad(t, true, name);
    out.emplace_back(name, t);
  }
  return out;
}

// Rank `rank`'s gradient of parameter k at `step`: integers in [-15, 15] times 1/4.
Tensor exact_gradient(int64_t n, size_t k, int step, int rank) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] =
        static_cast<float>((i * 7 + static_cast<int64_t>(k) * 5 + step * 3 + rank * 11) % 31 - 15) * 0.25f;
  return Tensor::from_vector<float>(v, {n});
}

}  // namespace

TEST(Zero1, ShardedStepsEqualUnshardedAndShardsRoundTrip) {
  const int world = g_group->size(), rank = g_group->rank();
  Net plain_net = make_net(), sharded_net = make_net();
  OptimizerConfig config{.weight_decay = 1e-2f, .max_grad_norm = 1.0f};
  auto plain = make_optimizer("adamw8bit", plain_net.parameters(), config);
  auto sharded = make_optimizer("adamw8bit", sharded_net.parameters(), config);
  shard_optimizer(*sharded, *g_group);
  EXPECT_EQ(sharded->sharded(), world > 1);
  if (world > 1) {
    EXPECT_LT(sharded->state_bytes(), plain->state_bytes() * 3 / (2 * world) + 4096)
        << "sharded " << sharded->state_bytes() << " bytes vs unsharded " << plain->state_bytes();
  }

  for (int step = 0; step < 4; ++step) {
    // Gradients from the plain net (both nets hold the same values at every step).
    autograd::GradientStore g_plain = global_gradients(plain_net, world, step);
    autograd::GradientStore g_sharded = global_gradients(sharded_net, world, step);
    plain->step(g_plain, 1e-2f);
    sharded->step(g_sharded, 1e-2f);
    auto a = plain_net.parameters(), b = sharded_net.parameters();
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_EQ(values(a[i].second), values(b[i].second)) << a[i].first << " after step " << step << " on "
                                                          << g_group->describe();
  }

  // Every rank writes its shard; rank 0's pid names the shared folder.
  Tensor pid = Tensor::scalar(static_cast<double>(getpid()), DType::I64).reshape({1});
  g_group->broadcast(pid, 0);
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              ("wick_zero_test_" + std::to_string(pid.to_vector<int64_t>()[0]));
  if (rank == 0) std::filesystem::create_directories(dir);
  g_group->barrier();
  save_optimizer_shard((dir / optimizer_shard_file_name(rank, world)).string(),
                       local_optimizer_shard(*sharded, rank, world));
  g_group->barrier();

  // The shards merge into exactly the unsharded optimizer's state.
  NamedTensors merged = load_optimizer_state(dir.string());
  std::map<std::string, Tensor> by_name(merged.begin(), merged.end());
  for (const auto& [name, tensor] : plain->state_tensors()) {
    ASSERT_EQ(by_name.count(name), 1u) << name;
    EXPECT_EQ(tensor.to(Device::cpu()).reshape({tensor.numel()}).to_vector<double>(),
              by_name.at(name).reshape({tensor.numel()}).to_vector<double>())
        << name;
  }

  // A fresh sharded optimizer restored from the files steps like the unsharded one.
  Net restored_net = make_net();
  {
    auto a = plain_net.parameters(), b = restored_net.parameters();
    for (size_t i = 0; i < a.size(); ++i) copy_into(b[i].second, a[i].second);  // the model weights
  }
  auto restored = make_optimizer("adamw8bit", restored_net.parameters(), config);
  shard_optimizer(*restored, *g_group);
  std::vector<OptimizerShard> shards = reshard_optimizer_state(dir.string(), world);
  load_optimizer_shard_into(*restored, shards[static_cast<size_t>(rank)]);
  EXPECT_EQ(restored->steps_taken(), 4);
  autograd::GradientStore g_plain = global_gradients(plain_net, world, 9);
  autograd::GradientStore g_restored = global_gradients(restored_net, world, 9);
  plain->step(g_plain, 1e-2f);
  restored->step(g_restored, 1e-2f);
  auto a = plain_net.parameters(), b = restored_net.parameters();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(values(a[i].second), values(b[i].second)) << a[i].first;

  if (world > 1) {
    EXPECT_THROW(sharded->state_tensors(), WickError);
  }
  g_group->barrier();
  if (rank == 0) std::filesystem::remove_all(dir);
}

TEST(Zero1, ReduceScatteredStepsWithClippingEqualTheAllReducedUnshardedOnes) {
  // MPI does not promise that its reduce-scatter adds the ranks' gradients in the order its all-reduce
  // does (Open MPI 4.1.4 here happens to; another version or algorithm may not), so these gradients
  // are small integers times 1/4: every sum over ranks is exact in f32 whatever the order, and the two
  // paths' mean gradients are equal bit for bit.
  // From there the sharded clipping norm (the same staged sum over the gathered first stage) and the
  // steps must be bitwise the unsharded ones.
  const int world = g_group->size(), rank = g_group->rank();
  using Specs = std::vector<std::pair<int64_t, DType>>;
  // 75,776 flat elements (> 65,536: the norm's row sums of 256 are gathered), 8-bit state for the
  // first two under adamw8bit; and 4,864 flat elements (the squares themselves are gathered).
  const Specs staged = {{70000, DType::F32}, {5000, DType::BF16}, {300, DType::F32}};
  const Specs small = {{4100, DType::F32}, {300, DType::BF16}};
  for (const char* name : {"sgd", "adamw", "adamw8bit"})
    for (const Specs* specs : {&staged, &small}) {
      SCOPED_TRACE(::testing::Message() << name << (specs == &staged ? " staged" : " small") << " on "
                                        << g_group->describe());
      OptimizerConfig config{.weight_decay = 1e-2f, .momentum = 0.9f, .max_grad_norm = 1.0f};
      NamedParameters plain_params = exact_parameters(*specs), sharded_params = exact_parameters(*specs);
      auto plain = make_optimizer(name, plain_params, config);
      auto sharded = make_optimizer(name, sharded_params, config);
      shard_optimizer(*sharded, *g_group);
      GradientBuckets plain_buckets(*plain, *g_group, 16 << 10), sharded_buckets(*sharded, *g_group, 16 << 10);
      EXPECT_FALSE(plain_buckets.reduce_scatters());
      ASSERT_EQ(sharded_buckets.reduce_scatters(), world > 1);
      auto [begin, end] = sharded->owned_range();
      for (int step = 0; step < 3; ++step) {
        SCOPED_TRACE(step);
        // Step 1: the last rank's first gradient element 123 is NaN; every rank must see a NaN norm.
        const bool with_nan = step == 1;
        autograd::GradientStore plain_store, sharded_store;
        for (size_t k = 0; k < specs->size(); ++k) {
          Tensor g = exact_gradient((*specs)[k].first, k, step, rank);
          if (with_nan && k == 0 && rank == world - 1)
            g.data_as<float>()[123] = std::numeric_limits<float>::quiet_NaN();
          plain_store.add(plain_params[k].second, g, true);
          sharded_store.add(sharded_params[k].second, g.clone(), true);
        }
        plain_buckets.arm(false);
        plain_buckets.finish(plain_store);
        sharded_buckets.arm(false);
        sharded_buckets.finish(sharded_store);
        std::vector<float> want = values(plain->flat_gradient().narrow(0, begin, end - begin));
        std::vector<float> got = values(sharded->flat_gradient().narrow(0, begin, end - begin));
        ASSERT_EQ(want.size(), got.size());
        EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
            << "the reduce-scattered range differs from the all-reduced gradient";

        StepReport a = plain->step_reduced(1e-2f), b = sharded->step_reduced(1e-2f);
        EXPECT_EQ(bits(a.grad_norm), bits(b.grad_norm)) << a.grad_norm << " vs " << b.grad_norm;
        EXPECT_EQ(std::isnan(b.grad_norm), with_nan);
        EXPECT_TRUE(a.clipped);
        EXPECT_EQ(a.clipped, b.clipped);
        Tensor n_nonfinite = Tensor::scalar(static_cast<double>(b.n_nonfinite), DType::I64).reshape({1});
        g_group->all_reduce(n_nonfinite);  // a sharded report counts its own range
        EXPECT_EQ(n_nonfinite.to_vector<int64_t>()[0], a.n_nonfinite);
        EXPECT_EQ(a.n_nonfinite, with_nan ? 1 : 0);
        for (size_t k = 0; k < specs->size(); ++k)
          ASSERT_EQ(values(plain_params[k].second), values(sharded_params[k].second)) << plain_params[k].first;
      }
    }
}

TEST(Zero1, ShardedOptimizerRefusesANormReducer) {
  if (g_group->size() == 1) GTEST_SKIP() << "the single group: shard_optimizer is a no-op";
  NamedParameters params = exact_parameters({{1000, DType::F32}});
  auto optimizer = make_optimizer("adamw", params);
  shard_optimizer(*optimizer, *g_group);
  EXPECT_THROW(optimizer->set_squared_norm_reducer([](const Tensor& t) { return t; }), WickError);
}
