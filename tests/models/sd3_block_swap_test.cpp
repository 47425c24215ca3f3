// train.blocks_to_swap on the tiny SD3.5-Medium-like MMDiT (tests/data/sd3: 3 joint blocks, the last one pre-only):
// the CPU build runs the GPU's code path (engine/block_swap.h), with host clones standing in for device copies and
// counted as device memory. Swapping changes nothing in the numbers (bitwise), with an f32 and a float8 base, and
// keeps at most two blocks' frozen weights resident, which is what the memory estimate counts for it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "engine/autograd/backward.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/autograd/ops_loss.h"
#include "engine/block_swap.h"
#include "engine/config/train_config.h"
#include "models/memory/memory_estimate.h"
#include "models/model_factory.h"
#include "models/nn/adapters.h"
#include "models/registry.h"
#include "models/sd3/sd3.h"
#include "runtime/error.h"
#include "runtime/safetensors.h"
#include "tests/test_data.h"

namespace wick::sd3 {
namespace {

using ::testing::HasSubstr;

std::string fixture_path(const std::string& name) { return wick::testing::test_data_dir() + "/sd3/" + name; }

const DataGeometry kTinyGeometry{
    .latent_channels = 16, .latent_sizes = {{8, 8}}, .text_length = 7, .text_dim = 32, .pooled_dim = 64};

TrainConfig tiny_config(const std::string& model_extra, const std::string& train) {
  const std::string yaml = "name: swap\ndevice: cpu\nmodel: {arch: sd3, name_or_path: " +
                           fixture_path("medium_sai.safetensors") + model_extra +
                           "}\nnetwork: {type: lora, linear: 4, linear_alpha: 8}\ntrain: {" + train +
                           "}\ndataset: {path: unused.h5}\n";
  return parse_config_string(yaml, "<test>", config_schema());
}

struct Step {
  std::vector<float> output;
  double loss = 0;
  std::vector<std::vector<float>> grads;
};

// Two training steps' forward and backward (the second one meets the prefetch the first left), then a forward
// without gradients (as the sampler runs it).
std::vector<Step> two_steps_and_inference(DiffusionModel& model) {
  SafetensorsFile lora = SafetensorsFile::open(fixture_path("medium_lora_case.safetensors"));
  auto adapters = nn::find_adapters(model);
  for (auto& [path, adapter] : adapters) {
    autograd::detach(adapter->down_weight()).copy_from(lora.get("sai." + path + ".lora_down").reshape(adapter->down_weight().shape()));
    autograd::detach(adapter->up_weight()).copy_from(lora.get("sai." + path + ".lora_up").reshape(adapter->up_weight().shape()));
  }
  auto& mmdit = dynamic_cast<MMDiT&>(model);
  auto forward = [&] {
    return mmdit.forward(lora.get("latents_square"), lora.get("sigma"), lora.get("context"), lora.get("pooled"));
  };
  std::vector<Step> steps;
  for (int i = 0; i < 2; ++i) {
    Tensor output = forward();
    Tensor loss = autograd::mse_loss(output, lora.get("target"));
    autograd::GradientStore grads = autograd::backward(loss);
    Step step{.output = output.to_vector<float>(), .loss = loss.item(), .grads = {}};
    for (auto& [path, adapter] : adapters) {
      step.grads.push_back(grads.get(adapter->down_weight()).to_vector<float>());
      step.grads.push_back(grads.get(adapter->up_weight()).to_vector<float>());
    }
    steps.push_back(std::move(step));
  }
  autograd::NoGradGuard no_grad;
  steps.push_back({.output = forward().to_vector<float>(), .loss = 0, .grads = {}});
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

TEST(Sd3BlockSwap, BitwiseEqualToNoSwappingWithinTwoBlocksResident) {
  for (const std::string& model_extra : {std::string(), std::string(", quantize: float8")}) {
    const std::string label = model_extra.empty() ? "f32 base" : "float8 base";
    std::shared_ptr<DiffusionModel> plain =
        build_model(tiny_config(model_extra, "gradient_checkpointing: true"), kTinyGeometry, Device::cpu());
    EXPECT_EQ(plain->block_paths(), (std::vector<std::string>{"joint_blocks.0", "joint_blocks.1", "joint_blocks.2"}));
    const std::vector<Step> want = two_steps_and_inference(*plain);
    for (int n : {1, 3}) {
      std::shared_ptr<DiffusionModel> swapped = build_model(
          tiny_config(model_extra, "gradient_checkpointing: true, blocks_to_swap: " + std::to_string(n)),
          kTinyGeometry, Device::cpu());
      const BlockSwapper* swapper = swapped->block_swapper();
      ASSERT_NE(swapper, nullptr);
      ASSERT_EQ(swapper->n_blocks(), n);
      EXPECT_EQ(swapper->block_name(0), "joint_blocks." + std::to_string(3 - n));  // the last n in execution order
      expect_bitwise_equal(two_steps_and_inference(*swapped), want, label + ", " + std::to_string(n) + " swapped");
      const BlockSwapper::Stats stats = swapper->stats();
      int64_t largest = 0, all = 0;
      for (int k = 0; k < n; ++k) largest = std::max(largest, swapper->block_bytes(k)), all += swapper->block_bytes(k);
      // Each training step copies every swapped block for its forward and for its recomputation in backward, all
      // prefetched but the first step's first; the inference forward copies each once more (it finds block 0
      // prefetched by the last backward), and leaves no prefetch behind its last block.
      EXPECT_EQ(stats.n_block_copies, 5 * n) << label << ", " << n;
      EXPECT_EQ(stats.n_prefetch_hits, 5 * n - 1) << label << ", " << n;
      EXPECT_EQ(stats.bytes_copied, 5 * all) << label << ", " << n;
      EXPECT_LE(stats.peak_resident_bytes, 2 * largest) << label << ", " << n;
      EXPECT_GT(stats.peak_resident_bytes, 0);
      EXPECT_EQ(stats.resident_bytes, 0) << "the inference forward leaves no copy alive";
      // The estimate counts those blocks' frozen weights in host memory and two blocks' buffers.
      MemoryInputs in{.batch_size = 2, .latent_height = 8, .latent_width = 8, .text_length = 7, .text_dim = 32,
                      .latent_channels = 16, .pooled_dim = 64, .gradient_checkpointing = true, .optimizer = "adamw"};
      in.blocks_to_swap = n;
      const MemoryEstimate estimate = estimate_training_memory(*swapped, in);
      EXPECT_EQ(estimate.swapped_weights, all) << label << ", " << n;
      EXPECT_EQ(estimate.swap_buffers, 2 * largest) << label << ", " << n;
    }
  }
}

TEST(Sd3BlockSwap, RefusesWhatCannotWork) {
  auto expect_config_error = [](const std::string& train, const std::string& text) {
    try {
      build_model(tiny_config("", train), kTinyGeometry, Device::cpu());
      ADD_FAILURE() << train << " was accepted";
    } catch (const WickError& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Config) << e.what();
      EXPECT_THAT(e.what(), HasSubstr(text));
    }
  };
  expect_config_error("blocks_to_swap: 2", "needs train.gradient_checkpointing: true");
  expect_config_error("gradient_checkpointing: true, blocks_to_swap: 4", "more than the model's 3 blocks");
}

}  // namespace
}  // namespace wick::sd3
