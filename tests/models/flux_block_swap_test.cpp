// train.blocks_to_swap on the tiny Flux dev model (tests/data/flux): the CPU build runs the GPU's code
// path (engine/block_swap.h), with host clones standing in for device copies and counted as device
// memory. Swapping changes nothing in the numbers (bitwise) and keeps at most two blocks' frozen
// weights resident, which is what the memory estimate counts for it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "engine/autograd/backward.h"
#include "engine/autograd/ops_loss.h"
#include "engine/block_swap.h"
#include "engine/config/train_config.h"
#include "models/flux/flux.h"
#include "models/memory/memory_estimate.h"
#include "models/model_factory.h"
#include "models/nn/adapters.h"
#include "models/registry.h"
#include "runtime/error.h"
#include "runtime/ops/copy.h"
#include "runtime/safetensors.h"
#include "tests/test_data.h"

namespace wick::flux {
namespace {

using ::testing::HasSubstr;

std::string fixture_path(const std::string& name) { return wick::testing::test_data_dir() + "/flux/" + name; }

const DataGeometry kTinyGeometry{
    .latent_channels = 4, .latent_sizes = {{6, 10}}, .text_length = 7, .text_dim = 32, .pooled_dim = 24};

TrainConfig tiny_config(const std::string& model_extra, const std::string& train) {
  const std::string yaml = "name: swap\ndevice: cpu\nmodel: {arch: flux, axes_dim: [4, 6, 6], name_or_path: " +
                           fixture_path("dev_bfl.safetensors") + model_extra +
                           "}\nnetwork: {type: lora, linear: 4, linear_alpha: 8}\ntrain: {" + train +
                           "}\ndataset: {path: unused.h5}\n";
  return parse_config_string(yaml, "<test>", config_schema());
}

struct Step {
  std::vector<float> output;
  double loss = 0;
  std::vector<std::vector<float>> grads;
};

// Two training steps' forward and backward (the second one meets the prefetch the first left).
std::vector<Step> two_steps(DiffusionModel& model) {
  SafetensorsFile lora = SafetensorsFile::open(fixture_path("dev_lora_case.safetensors"));
  auto adapters = nn::find_adapters(model);
  for (auto& [path, adapter] : adapters) {
    copy_into(adapter->down_weight(), lora.get("bfl." + path + ".lora_down"));
    copy_into(adapter->up_weight(), lora.get("bfl." + path + ".lora_up"));
  }
  auto& flux = dynamic_cast<FluxTransformer&>(model);
  std::vector<Step> steps;
  for (int i = 0; i < 2; ++i) {
    Tensor output = flux.forward(lora.get("latents"), lora.get("timestep"), lora.get("context"), lora.get("pooled"),
                                 lora.get("guidance"));
    Tensor loss = autograd::mse_loss(pack_latents(output), lora.get("target"));
    autograd::GradientStore grads = autograd::backward(loss);
    Step step{.output = output.to_vector<float>(), .loss = loss.item(), .grads = {}};
    for (auto& [path, adapter] : adapters) {
      step.grads.push_back(grads.get(adapter->down_weight()).to_vector<float>());
      step.grads.push_back(grads.get(adapter->up_weight()).to_vector<float>());
    }
    steps.push_back(std::move(step));
  }
  return steps;
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

TEST(FluxBlockSwap, BitwiseEqualToNoSwappingWithinTwoBlocksResident) {
  for (const std::string& model_extra : {std::string(), std::string(", quantize: float8")}) {
    const std::string label = model_extra.empty() ? "f32 base" : "float8 base";
    std::shared_ptr<DiffusionModel> plain =
        build_model(tiny_config(model_extra, "gradient_checkpointing: true"), kTinyGeometry, Device::cpu());
    const std::vector<Step> want = two_steps(*plain);
    for (int n : {1, 4}) {
      std::shared_ptr<DiffusionModel> swapped = build_model(
          tiny_config(model_extra, "gradient_checkpointing: true, blocks_to_swap: " + std::to_string(n)),
          kTinyGeometry, Device::cpu());
      const BlockSwapper* swapper = swapped->block_swapper();
      ASSERT_NE(swapper, nullptr);
      ASSERT_EQ(swapper->n_blocks(), n);
      EXPECT_EQ(swapper->block_name(n - 1), "single_blocks.1");  // the last n blocks in execution order
      expect_bitwise_equal(two_steps(*swapped), want, label + ", " + std::to_string(n) + " swapped");
      const BlockSwapper::Stats stats = swapper->stats();
      int64_t largest = 0, all = 0;
      for (int k = 0; k < n; ++k) largest = std::max(largest, swapper->block_bytes(k)), all += swapper->block_bytes(k);
      // Each step copies every swapped block for its forward and for its recomputation in backward; the
      // copies are prefetched (forward k+1, backward k-1, the last block as the forward leaves it, block 0
      // as backward leaves it, for the next step), so every acquire hits but the first step's first one,
      // and one prefetch of block 0 is left at the end.
      EXPECT_EQ(stats.n_block_copies, 4 * n + 1) << label << ", " << n;
      EXPECT_EQ(stats.n_prefetch_hits, 4 * n - 1) << label << ", " << n;
      EXPECT_EQ(stats.bytes_copied, 4 * all + swapper->block_bytes(0)) << label << ", " << n;
      EXPECT_LE(stats.peak_resident_bytes, 2 * largest) << label << ", " << n;
      EXPECT_GT(stats.peak_resident_bytes, 0);
      // The estimate counts those blocks' frozen weights in host memory and two blocks' buffers.
      auto group_free_inputs = MemoryInputs{.batch_size = 2, .latent_height = 6, .latent_width = 10,
                                            .text_length = 7, .text_dim = 32, .latent_channels = 4,
                                            .pooled_dim = 24, .gradient_checkpointing = true, .optimizer = "adamw"};
      group_free_inputs.blocks_to_swap = n;
      const MemoryEstimate estimate = estimate_training_memory(*swapped, group_free_inputs);
      EXPECT_EQ(estimate.swapped_weights, all) << label << ", " << n;
      EXPECT_EQ(estimate.swap_buffers, 2 * largest) << label << ", " << n;
    }
  }
}

TEST(FluxBlockSwap, RefusesWhatCannotWork) {
  auto expect_config_error = [](const std::string& model_extra, const std::string& train, const std::string& text) {
    try {
      build_model(tiny_config(model_extra, train), kTinyGeometry, Device::cpu());
      ADD_FAILURE() << train << " was accepted";
    } catch (const WickError& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Config) << e.what();
      EXPECT_THAT(e.what(), HasSubstr(text));
    }
  };
  expect_config_error("", "blocks_to_swap: 2", "needs train.gradient_checkpointing: true");
  expect_config_error("", "gradient_checkpointing: true, blocks_to_swap: 5", "more than the model's 4 blocks");
}

}  // namespace
}  // namespace wick::flux
