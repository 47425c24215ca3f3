// ZeRO-1 (engine/distributed/zero.h) on the group wick_comm_tests runs in: a sharded AdamW8bit takes
// bitwise the same steps as an unsharded one fed the same gradients, keeps about 1/world of the state,
// and its shards (one file per rank) merge into exactly the unsharded state and load back.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <unistd.h>
#include <vector>

#include "engine/autograd/backward.h"
#include "engine/autograd/ops_loss.h"
#include "engine/checkpoint/optimizer_shards.h"
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
