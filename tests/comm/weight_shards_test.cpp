// Weight sharding (distributed.shard: weights; engine/block_swap.h "Sharded") on the group wick_comm_tests runs in:
// three frozen blocks (f32 with a bias, float8 codes with per-row scales, bf16) whose sizes straddle the ranks'
// boundaries. Each rank keeps 1/N of each packed block; a checkpointed forward and backward, twice, give bitwise the
// outputs and input gradients of the unsharded blocks; every block is gathered once in forward and once in backward
// (all but the first acquire prefetched), and the bytes received equal 2·(N−1)/N of the packed sizes per step; at
// most two gathered blocks are alive; between runs a slot holds a NaN placeholder of its shape; the allocator's bytes
// for the weights fall to this rank's shards (1/N). The same with the last block's shard in host memory: its copy to
// the device counted twice per step, the results unchanged.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "engine/autograd/backward.h"
#include "engine/autograd/checkpoint.h"
#include "engine/autograd/node.h"
#include "engine/autograd/ops_layout.h"
#include "engine/autograd/ops_loss.h"
#include "engine/block_swap.h"
#include "engine/init.h"
#include "models/flux/flux.h"
#include "models/model_factory.h"
#include "models/nn/adapters.h"
#include "models/nn/linear.h"
#include "runtime/memory.h"
#include "runtime/ops/random.h"
#include "tests/comm/test_group.h"
#include "tests/models/step_memory.h"

using namespace wick;

namespace {

struct Blocks {
  std::vector<std::shared_ptr<nn::Linear>> layers;
};

Blocks make_blocks() {
  set_init_seed(11);
  Blocks b;
  b.layers.push_back(std::make_shared<nn::Linear>(37, 29, nn::LinearOptions{.trainable = false}));
  b.layers.push_back(std::make_shared<nn::Linear>(29, 41, nn::LinearOptions{.trainable = false}));
  b.layers.push_back(std::make_shared<nn::Linear>(
      41, 13, nn::LinearOptions{.bias = false, .dtype = DType::BF16, .trainable = false}));
  b.layers[1]->quantize_float8(Float8Scaling::PerRow);
  return b;
}

struct Result {
  std::vector<float> output, input_grad;
};

// One step: x [5, 37] (a leaf needing its gradient) through the three blocks, each checkpointed, acquired
// from `swapper` when there is one; the loss is the mean square against a fixed target.
Result step(Blocks& b, BlockSwapper* swapper, int seed) {
  Tensor x = randn({5, 37}, derive_stream(5, static_cast<uint64_t>(seed), 0, RngPurpose::Test));
  autograd::set_requires_grad(x, true, "x");
  if (swapper) swapper->begin_forward(/*backward_follows=*/true);
  Tensor h = x;
  for (int k = 0; k < 3; ++k) {
    auto fn = [&, k](const std::vector<Tensor>& in) {
      SwappedBlock scope(swapper, k);
      Tensor y = b.layers[static_cast<size_t>(k)]->forward(in[0]);
      return std::vector<Tensor>{y.dtype() == DType::F32 ? y : autograd::to_dtype(y, DType::F32)};
    };
    if (k == 2) h = autograd::to_dtype(h, DType::BF16);
    h = autograd::checkpoint(fn, {h}, {}).at(0);
  }
  Tensor target = randn({5, 13}, derive_stream(6, static_cast<uint64_t>(seed), 0, RngPurpose::Test));
  Tensor loss = autograd::mse_loss(h, target);
  autograd::GradientStore grads;
  autograd::backward(loss, grads);
  return {h.to_vector<float>(), grads.get(x).to_vector<float>()};
}

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// host_shard: the last block's shard in host memory (block swapping of the shards), copied in before its gather.
void check_sharded_blocks(bool host_shard) {
  const int world = g_group->size();
  Blocks plain = make_blocks(), sharded = make_blocks();
  // The packed size of each block as docs/distributed.md gives it: the frozen tensors in slot order, each at a
  // 256-byte boundary, padded to a multiple of 4·N bytes.
  std::vector<int64_t> packed;
  std::vector<Shape> weight_shapes;
  for (auto& layer : sharded.layers) {
    int64_t end = 0;
    for (auto& [name, t] : layer->named_parameters()) end = round_up(end, 256) + static_cast<int64_t>(t.nbytes());
    packed.push_back(round_up(end, 4 * world));
    weight_shapes.push_back(layer->parameter("weight").shape());
  }
  int64_t whole = 0, shards = 0;
  for (auto& layer : sharded.layers)
    for (auto& [name, t] : layer->named_parameters()) whole += static_cast<int64_t>(t.nbytes());
  // What the allocator holds for the weights before and after: the whole tensors go, this rank's shards
  // (and one-element placeholders) come.
  const int64_t held_before = memory_stats(g_group->device()).current_bytes;
  auto swapper = std::make_shared<BlockSwapper>(g_group->device(), g_group);
  for (int k = 0; k < 3; ++k)
    EXPECT_EQ(swapper->add_block("blocks." + std::to_string(k), *sharded.layers[k], host_shard && k == 2), k);
  EXPECT_EQ(swapper->shard_in_host_memory(2), host_shard);
  ASSERT_TRUE(swapper->sharded());
  for (int k = 0; k < 3; ++k) shards += swapper->shard_bytes(k);
  const int64_t held_after = memory_stats(g_group->device()).current_bytes;
  std::printf("  rank %d of %d: block weights %lld bytes whole, %lld held after sharding (allocator: %+lld)\n",
              g_group->rank(), world, static_cast<long long>(whole), static_cast<long long>(shards),
              static_cast<long long>(held_after - held_before));
  EXPECT_NEAR(static_cast<double>(held_after - held_before), static_cast<double>(shards - whole), 1024.0);
  EXPECT_LE(shards, whole / world + 3 * (256 + 4 * world));
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(swapper->block_bytes(k), packed[static_cast<size_t>(k)]) << k;
    EXPECT_EQ(swapper->shard_bytes(k) * world, packed[static_cast<size_t>(k)]) << k;
    // Between runs: the shape, one NaN broadcast.
    const Tensor& w = sharded.layers[static_cast<size_t>(k)]->parameter("weight");
    EXPECT_EQ(w.shape(), weight_shapes[static_cast<size_t>(k)]);
    if (k == 0) {
      EXPECT_TRUE(std::isnan(w.to_vector<float>().front()));
    }
  }
  for (int s = 0; s < 2; ++s) {
    const BlockSwapper::Stats before = swapper->stats();
    Result want = step(plain, nullptr, s), got = step(sharded, swapper.get(), s);
    EXPECT_EQ(want.output, got.output) << "step " << s;
    EXPECT_EQ(want.input_grad, got.input_grad) << "step " << s;
    const BlockSwapper::Stats after = swapper->stats();
    EXPECT_EQ(after.n_block_copies - before.n_block_copies, 6) << "each block once in forward, once in backward";
    // Forward: blocks 1 and 2 prefetched; backward: 2 (prefetched as the forward left it), 1 and 0.
    EXPECT_EQ(after.n_prefetch_hits - before.n_prefetch_hits, 5);
    int64_t expected = 0;
    for (int64_t p : packed) expected += 2 * (p - p / world);
    EXPECT_EQ(after.bytes_copied - before.bytes_copied, expected);
    EXPECT_EQ(after.bytes_staged - before.bytes_staged, host_shard ? 2 * swapper->shard_bytes(2) : 0);
    EXPECT_GE(after.wait_s, 0.0);
  }
  const int64_t two_largest = packed[0] + packed[1] + packed[2] - std::min({packed[0], packed[1], packed[2]});
  // Two gathered blocks, and with a host shard the device copy of the one whose gather is in flight.
  EXPECT_LE(swapper->stats().peak_resident_bytes, two_largest + (host_shard ? swapper->shard_bytes(2) : 0));
  EXPECT_EQ(swapper->stats().resident_bytes, 0) << "no gather outlives the step";
}

}  // namespace

TEST(WeightShards, BitwiseTheUnshardedBlocksAndTheDocumentedTraffic) { check_sharded_blocks(false); }

TEST(WeightShards, AHostShardIsCopiedInBeforeItsGather) { check_sharded_blocks(true); }

// The tiny Flux LoRA (checkpointing, AdamW) with its blocks sharded over this group: one training step's measured
// peak of tensor bytes on this rank within 10% of the estimate for this many ranks, whose weights term is the
// unsharded one's non-block part plus 1/N of the blocks' packed bytes.
TEST(WeightShards, TheStepsPeakPerRankIsTheEstimates) {
  const int world = g_group->size();
  auto build = [&] {
    auto model = std::make_shared<flux::FluxTransformer>(tiny_flux(1, DType::F32));
    model->set_all_trainable(false);
    nn::apply_adapters(*model, {.patterns = {"double_blocks.*", "single_blocks.*"}, .options = {.rank = 4}});
    model->set_gradient_checkpointing(true);
    attach_weight_shards(*model, g_group, g_group->device());
    return std::shared_ptr<DiffusionModel>(model);
  };
  Measurement m = measure_step(build, {.size = 16}, "adamw", true, {.shard_weights = true, .world_size = world});
  const double ratio = static_cast<double>(m.estimate.total) / static_cast<double>(m.peak);
  std::printf("  rank %d of %d: tiny Flux LoRA step with the weights sharded: measured peak %lld, estimate %lld "
              "(%.3f); frozen weights in the estimate %lld of %lld packed block bytes\n",
              g_group->rank(), world, static_cast<long long>(m.peak), static_cast<long long>(m.estimate.total), ratio,
              static_cast<long long>(m.estimate.frozen_weights), static_cast<long long>(m.estimate.sharded_weights));
  EXPECT_NEAR(ratio, 1.0, 0.10);
  EXPECT_EQ(m.estimate.shard_ranks, world);
  // The frozen weights term: the parts outside the blocks (the same on every rank count) and 1/N of the blocks.
  auto unsharded = std::make_shared<flux::FluxTransformer>(tiny_flux(1, DType::F32));
  int64_t outside = 0;
  const std::vector<std::string> blocks = unsharded->block_paths();
  for (const auto& [name, tensor] : unsharded->named_parameters()) {
    bool in_block = false;
    for (const std::string& path : blocks) in_block = in_block || name.rfind(path + ".", 0) == 0;
    if (!in_block) outside += static_cast<int64_t>(tensor.nbytes());
  }
  EXPECT_NEAR(static_cast<double>(m.estimate.frozen_weights),
              static_cast<double>(outside) + static_cast<double>(m.estimate.sharded_weights) / world, 64.0 * 4);
}
