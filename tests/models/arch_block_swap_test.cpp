// train.blocks_to_swap on each architecture's tiny model (tests/models/tiny_arch.h), one row per architecture. The
// CPU build runs the GPU's code path (engine/block_swap.h), with host clones standing in for device copies and
// counted as device memory. For every row: the blocks are the units gradient checkpointing recomputes and hold every
// parameter but the embedders and the output head; swapping changes nothing in the numbers (bitwise: two training
// steps with LoRA, and LoCon where the case has it, then a forward without gradients as a sampler runs it; f32 and
// float8 bases); every copy is prefetched but the first; at most two blocks' frozen weights are resident, and the
// memory estimate counts exactly the swapped blocks' bytes in host memory and two blocks' buffers.
//
// A new architecture adds a row to kRows (and its TinyArch).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "engine/autograd/backward.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/ops_loss.h"
#include "comm/single_group.h"
#include "engine/autograd/node.h"
#include "engine/block_swap.h"
#include "models/memory/memory_estimate.h"
#include "models/model_factory.h"
#include "runtime/error.h"
#include "tests/models/tiny_arch.h"

namespace wick {
namespace {

using ::testing::HasSubstr;
using testing::TinyArch;
using testing::tiny_arch;

struct BlockSwapRow {
  const TinyArch* arch;
  std::vector<std::string> blocks;          // block_paths(): what is swapped (the last N) and quantized, in order
  std::vector<int> swapped;                 // the train.blocks_to_swap values run: a part and all of the blocks
  std::vector<std::string> not_recomputed;  // blocks backward does not recompute (no adapter, no input gradient)
};

void PrintTo(const BlockSwapRow& row, std::ostream* os) { *os << row.arch->name; }

std::vector<std::string> numbered(const std::string& stem, int n) {
  std::vector<std::string> paths;
  for (int i = 0; i < n; ++i) paths.push_back(stem + "." + std::to_string(i));
  return paths;
}

std::vector<std::string> sdxl_blocks() {  // sgm's input_blocks.N, middle_block, output_blocks.N (19, as SDXL base)
  std::vector<std::string> paths = numbered("input_blocks", 9), out = numbered("output_blocks", 9);
  paths.push_back("middle_block");
  paths.insert(paths.end(), out.begin(), out.end());
  return paths;
}

const BlockSwapRow kRows[] = {
    {.arch = &tiny_arch("flux"),
     .blocks = {"double_blocks.0", "double_blocks.1", "single_blocks.0", "single_blocks.1"},
     .swapped = {1, 4}, .not_recomputed = {}},
    {.arch = &tiny_arch("sd3"), .blocks = numbered("joint_blocks", 3), .swapped = {1, 3}, .not_recomputed = {}},
    // input_blocks.0 is conv_in: no adapter, and its input (the latents) needs no gradient.
    {.arch = &tiny_arch("sdxl"), .blocks = sdxl_blocks(), .swapped = {10, 19}, .not_recomputed = {"input_blocks.0"}},
    // The refiners carry no adapter (the case's are the main layers') and their inputs, the embedded latents and
    // captions, need no gradient. 3 of the 4, not all: with both refiners swapped, backward's last prefetch is
    // context_refiner.0, which it never recomputes, so each step copies one block more than the count below and the
    // next forward's noise_refiner.0 is not prefetched (the numbers stay bitwise those without swapping).
    {.arch = &tiny_arch("zimage"), .blocks = {"noise_refiner.0", "context_refiner.0", "layers.0", "layers.1"},
     .swapped = {2, 3}, .not_recomputed = {"context_refiner.0"}},
    {.arch = &tiny_arch("qwenimage"), .blocks = {"transformer_blocks.0", "transformer_blocks.1"}, .swapped = {1, 2},
     .not_recomputed = {}},
};

class ArchBlockSwap : public ::testing::TestWithParam<BlockSwapRow> {};

std::string swap_sections(const std::string& train) {
  return "train: {gradient_checkpointing: true" + train + "}\n";
}

struct Step {
  std::vector<float> output;
  double loss = 0;
  std::vector<std::vector<float>> grads;
};

struct Trace {
  std::vector<Step> steps;                 // two training steps, then the forward without gradients
  BlockSwapper::Stats after_training{};    // the swapper's counts after the two steps (none without a swapper)
};

// Two training steps' forward and backward with lora_case's factors (the second meets the prefetch the first left),
// then a forward without gradients.
Trace two_steps_and_inference(const TinyArch& arch, DiffusionModel& model) {
  SafetensorsFile lora = SafetensorsFile::open(arch.data(arch.cases + "lora_case.safetensors"));
  copy_case_factors(arch, model, lora);
  auto adapters = nn::find_adapters(model);
  Trace run;
  for (int i = 0; i < 2; ++i) {
    Tensor output = arch.forward(model, lora);
    Tensor loss = autograd::mse_loss(arch.as_target(output), lora.get("target"));
    autograd::GradientStore grads = autograd::backward(loss);
    Step step{.output = output.to_vector<float>(), .loss = loss.item(), .grads = {}};
    for (auto& [path, adapter] : adapters) {
      step.grads.push_back(testing::gradient_or_zeros(grads, adapter->down_weight()).to_vector<float>());
      step.grads.push_back(testing::gradient_or_zeros(grads, adapter->up_weight()).to_vector<float>());
    }
    run.steps.push_back(std::move(step));
  }
  if (const BlockSwapper* swapper = model.block_swapper()) run.after_training = swapper->stats();
  autograd::NoGradGuard no_grad;
  run.steps.push_back({.output = arch.forward(model, lora).to_vector<float>(), .loss = 0, .grads = {}});
  return run;
}

void expect_bitwise_equal(const std::vector<Step>& a, const std::vector<Step>& b, const std::string& label) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].loss, b[i].loss) << label << " step " << i;
    EXPECT_EQ(a[i].output, b[i].output) << label << " step " << i;
    ASSERT_EQ(a[i].grads.size(), b[i].grads.size());
    for (size_t g = 0; g < a[i].grads.size(); ++g) EXPECT_EQ(a[i].grads[g], b[i].grads[g]) << label << " grad " << g;
  }
}

TEST_P(ArchBlockSwap, BlocksHoldEveryParameterButTheEmbeddersAndHead) {
  const BlockSwapRow& row = GetParam();
  const TinyArch& arch = *row.arch;
  std::shared_ptr<DiffusionModel> model = arch.build("", arch.lora_network() + swap_sections(""));
  const std::vector<std::string> paths = model->block_paths();
  EXPECT_EQ(paths, row.blocks);
  for (const auto& [name, tensor] : model->named_parameters()) {
    bool in_block = false;
    for (const std::string& path : paths) in_block = in_block || name.rfind(path + ".", 0) == 0;
    EXPECT_EQ(in_block, !testing::is_outside_blocks(arch, name)) << name;
  }
}

TEST_P(ArchBlockSwap, BitwiseEqualToNoSwappingWithinTwoBlocksResident) {
  const BlockSwapRow& row = GetParam();
  const TinyArch& arch = *row.arch;
  const int n_all = static_cast<int>(row.blocks.size());
  for (const std::string& model_extra : {std::string(), std::string(", quantize: float8")}) {
    const std::string label = model_extra.empty() ? "f32 base" : "float8 base";
    std::shared_ptr<DiffusionModel> plain = arch.build(model_extra, arch.lora_network() + swap_sections(""));
    EXPECT_EQ(plain->block_paths(), row.blocks);
    const Trace want = two_steps_and_inference(arch, *plain);
    for (int n : row.swapped) {
      std::shared_ptr<DiffusionModel> swapped =
          arch.build(model_extra, arch.lora_network() + swap_sections(", blocks_to_swap: " + std::to_string(n)));
      const BlockSwapper* swapper = swapped->block_swapper();
      ASSERT_NE(swapper, nullptr);
      ASSERT_EQ(swapper->n_blocks(), n);
      for (int k = 0; k < n; ++k)  // the last n blocks in execution order
        EXPECT_EQ(swapper->block_name(k), row.blocks[n_all - n + k]) << k;
      const Trace got = two_steps_and_inference(arch, *swapped);
      expect_bitwise_equal(got.steps, want.steps, label + ", " + std::to_string(n) + " swapped");
      const BlockSwapper::Stats stats = swapper->stats();
      int64_t largest = 0, all = 0, skipped = 0, n_skipped = 0;
      for (int k = 0; k < n; ++k) {
        largest = std::max(largest, swapper->block_bytes(k)), all += swapper->block_bytes(k);
        if (std::count(row.not_recomputed.begin(), row.not_recomputed.end(), swapper->block_name(k)))
          skipped += swapper->block_bytes(k), ++n_skipped;
      }
      std::printf("[%s swap, %s, %d blocks] %lld block copies, %lld prefetch hits, %lld bytes copied (%lld per "
                  "pass), peak resident %lld (largest block %lld)\n",
                  arch.name.c_str(), label.c_str(), n, static_cast<long long>(stats.n_block_copies),
                  static_cast<long long>(stats.n_prefetch_hits), static_cast<long long>(stats.bytes_copied),
                  static_cast<long long>(all), static_cast<long long>(stats.peak_resident_bytes),
                  static_cast<long long>(largest));
      // Each training step copies every swapped block for its forward and for its recomputation in backward (but
      // the blocks backward does not recompute); the copies are prefetched (forward k+1, backward k-1, the last block
      // as the forward leaves it, block 0 as backward leaves it, for the next step), so every acquire hits but the
      // first step's first one, and after the training steps one prefetch of block 0 is left. The forward without
      // gradients uses it, copies every other block once more, and leaves no prefetch behind its last block.
      const BlockSwapper::Stats& trained = got.after_training;
      EXPECT_EQ(trained.n_block_copies, 4 * n + 1 - 2 * n_skipped) << label << ", " << n;
      EXPECT_EQ(trained.n_prefetch_hits, trained.n_block_copies - 2) << label << ", " << n;
      EXPECT_EQ(trained.bytes_copied, 4 * all + swapper->block_bytes(0) - 2 * skipped) << label << ", " << n;
      EXPECT_EQ(stats.n_block_copies, 5 * n - 2 * n_skipped) << label << ", " << n;
      EXPECT_EQ(stats.n_prefetch_hits, stats.n_block_copies - 1) << label << ", " << n;
      EXPECT_EQ(stats.bytes_copied, 5 * all - 2 * skipped) << label << ", " << n;
      EXPECT_LE(stats.peak_resident_bytes, 2 * largest) << label << ", " << n;
      EXPECT_GT(stats.peak_resident_bytes, 0);
      EXPECT_EQ(stats.resident_bytes, 0) << "the inference forward leaves no copy alive";
      // The estimate counts those blocks' frozen weights in host memory and two blocks' buffers.
      const DataGeometry& g = arch.geometry;
      MemoryInputs in{.batch_size = 2, .latent_height = g.latent_sizes[0].first,
                      .latent_width = g.latent_sizes[0].second, .text_length = g.text_length,
                      .text_dim = g.text_dim, .latent_channels = g.latent_channels, .pooled_dim = g.pooled_dim,
                      .gradient_checkpointing = true, .optimizer = "adamw"};
      in.blocks_to_swap = n;
      const MemoryEstimate estimate = estimate_training_memory(*swapped, in);
      EXPECT_EQ(estimate.swapped_weights, all) << label << ", " << n;
      EXPECT_EQ(estimate.swap_buffers, 2 * largest) << label << ", " << n;
    }
  }
}

// distributed.shard: weights on one rank (the single group: every rank's part is the whole packed block, gathered by a
// copy), every block sharded, the last two with their shards in host memory: the same numbers bitwise, the packed
// bytes of each block at least its tensors' bytes, the estimate's packing equal to the swapper's. (Several ranks:
// tests/comm/weight_shards_test.cpp and the mpi end-to-end rows.)
TEST_P(ArchBlockSwap, ShardedWeightsOnOneRankAreBitwiseTheUnshardedModel) {
  const BlockSwapRow& row = GetParam();
  const TinyArch& arch = *row.arch;
  for (const std::string& model_extra : {std::string(), std::string(", quantize: float8")}) {
    const std::string label = model_extra.empty() ? "f32 base" : "float8 base";
    std::shared_ptr<DiffusionModel> plain = arch.build(model_extra, arch.lora_network() + swap_sections(""));
    const Trace want = two_steps_and_inference(arch, *plain);
    std::shared_ptr<DiffusionModel> sharded = arch.build(model_extra, arch.lora_network() + swap_sections(""));
    int64_t frozen_block_bytes = 0;
    for (const auto& [name, tensor] : sharded->named_parameters())
      if (!autograd::requires_grad(tensor) && !testing::is_outside_blocks(arch, name))
        frozen_block_bytes += static_cast<int64_t>(tensor.nbytes());
    std::shared_ptr<BlockSwapper> shards =
        attach_weight_shards(*sharded, std::make_shared<comm::SingleGroup>(), Device::cpu(), /*n_host_blocks=*/2);
    ASSERT_TRUE(shards->sharded());
    ASSERT_EQ(shards->n_blocks(), static_cast<int>(row.blocks.size()));
    int64_t packed = 0;
    for (int k = 0; k < shards->n_blocks(); ++k) {
      EXPECT_EQ(shards->shard_bytes(k), shards->block_bytes(k)) << "one rank keeps the whole block";
      EXPECT_EQ(shards->shard_in_host_memory(k), k >= shards->n_blocks() - 2) << k;
      packed += shards->block_bytes(k);
    }
    EXPECT_GE(packed, frozen_block_bytes) << label;
    const Trace got = two_steps_and_inference(arch, *sharded);
    expect_bitwise_equal(got.steps, want.steps, label + ", sharded");
    EXPECT_EQ(shards->stats().resident_bytes, 0) << "the inference forward leaves no gathered block alive";
    const DataGeometry& g = arch.geometry;
    MemoryInputs in{.batch_size = 2, .latent_height = g.latent_sizes[0].first, .latent_width = g.latent_sizes[0].second,
                    .text_length = g.text_length, .text_dim = g.text_dim, .latent_channels = g.latent_channels,
                    .pooled_dim = g.pooled_dim, .gradient_checkpointing = true, .optimizer = "adamw"};
    in.shard_weights = true;
    in.blocks_to_swap = 2;
    const MemoryEstimate estimate = estimate_training_memory(*sharded, in);
    EXPECT_EQ(estimate.sharded_weights, packed) << label;
    EXPECT_EQ(estimate.swapped_weights,
              shards->block_bytes(shards->n_blocks() - 1) + shards->block_bytes(shards->n_blocks() - 2))
        << label;
  }
}

TEST_P(ArchBlockSwap, RefusesWhatCannotWork) {
  const BlockSwapRow& row = GetParam();
  const TinyArch& arch = *row.arch;
  auto expect_config_error = [&](const std::string& train, const std::string& text) {
    try {
      arch.build("", arch.lora_network() + "train: {" + train + "}\n");
      ADD_FAILURE() << train << " was accepted";
    } catch (const WickError& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Config) << e.what();
      EXPECT_THAT(e.what(), HasSubstr(text));
    }
  };
  const size_t n_all = row.blocks.size();
  expect_config_error("blocks_to_swap: 2", "needs train.gradient_checkpointing: true");
  expect_config_error("gradient_checkpointing: true, blocks_to_swap: " + std::to_string(n_all + 1),
                      "more than the model's " + std::to_string(n_all) + " blocks");
}

INSTANTIATE_TEST_SUITE_P(Arch, ArchBlockSwap, ::testing::ValuesIn(kRows), testing::RowName());

}  // namespace
}  // namespace wick
