// train.blocks_to_swap on the tiny SDXL UNet (tests/data/sdxl): its blocks are sgm's input_blocks.N, middle_block and
// output_blocks.N (19 here, as in SDXL base), the units its gradient checkpointing recomputes. The CPU build runs the
// GPU's code path (engine/block_swap.h), with host clones standing in for device copies and counted as device memory.
// Swapping changes nothing in the numbers (bitwise, f32 and float8 bases, LoRA + LoCon) and keeps at most two blocks'
// frozen weights resident, which is what the memory estimate counts for it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
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
#include "models/sdxl/sdxl_unet.h"
#include "runtime/error.h"
#include "runtime/safetensors.h"
#include "tests/test_data.h"

namespace wick::sdxl {
namespace {

using ::testing::HasSubstr;

std::string fixture_path(const std::string& name) { return wick::testing::test_data_dir() + "/sdxl/" + name; }

const DataGeometry kTinyGeometry{
    .latent_channels = 4, .latent_sizes = {{16, 16}}, .text_length = 7, .text_dim = 32, .pooled_dim = 16};

TrainConfig tiny_config(const std::string& model_extra, const std::string& train) {
  const std::string yaml = "name: swap\ndevice: cpu\nmodel: {arch: sdxl, head_dim: 8, norm_groups: 4, "
                           "addition_time_embed_dim: 8, name_or_path: " +
                           fixture_path("tiny_ldm.safetensors") + model_extra +
                           "}\nnetwork: {type: lora, linear: 4, linear_alpha: 8, conv: 2, conv_alpha: 1}\ntrain: {" +
                           train + "}\ndataset: {path: unused.h5}\n";
  return parse_config_string(yaml, "<test>", config_schema());
}

void copy_into_slot(Tensor& slot, const Tensor& value) {
  autograd::detach(slot).copy_from(value.reshape(slot.shape()));
}

struct Step {
  std::vector<float> output;
  double loss = 0;
  std::vector<std::vector<float>> grads;
};

// Two training steps' forward and backward (the second one meets the prefetch the first left), then a forward
// without gradients (as a sampler runs it).
std::vector<Step> two_steps_and_inference(DiffusionModel& model) {
  SafetensorsFile lora = SafetensorsFile::open(fixture_path("lora_case.safetensors"));
  auto adapters = nn::find_adapters(model);
  for (auto& [path, adapter] : adapters) {
    copy_into_slot(adapter->down_weight(), lora.get("ldm." + path + ".lora_down"));
    copy_into_slot(adapter->up_weight(), lora.get("ldm." + path + ".lora_up"));
  }
  auto& unet = dynamic_cast<Unet&>(model);
  auto forward = [&] {
    return unet.forward(lora.get("latents_square"), lora.get("timesteps"), lora.get("context"), lora.get("pooled"),
                        lora.get("time_ids"));
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

TEST(SdxlBlockSwap, BlocksAreSgmsInputMiddleAndOutputBlocks) {
  std::shared_ptr<DiffusionModel> model =
      build_model(tiny_config("", "gradient_checkpointing: true"), kTinyGeometry, Device::cpu());
  const std::vector<std::string> paths = model->block_paths();
  ASSERT_EQ(paths.size(), 19u);
  EXPECT_EQ(paths[0], "input_blocks.0");
  EXPECT_EQ(paths[8], "input_blocks.8");
  EXPECT_EQ(paths[9], "middle_block");
  EXPECT_EQ(paths[10], "output_blocks.0");
  EXPECT_EQ(paths[18], "output_blocks.8");
  // Every parameter but the time and label embeddings and the output head is in a block.
  for (const auto& [name, tensor] : model->named_parameters()) {
    bool in_block = false;
    for (const std::string& path : paths) in_block = in_block || name.rfind(path + ".", 0) == 0;
    EXPECT_EQ(in_block, name.rfind("time_embed.", 0) != 0 && name.rfind("label_emb.", 0) != 0 &&
                            name.rfind("out.", 0) != 0)
        << name;
  }
}

TEST(SdxlBlockSwap, BitwiseEqualToNoSwappingWithinTwoBlocksResident) {
  for (const std::string& model_extra : {std::string(), std::string(", quantize: float8")}) {
    const std::string label = model_extra.empty() ? "f32 base" : "float8 base";
    std::shared_ptr<DiffusionModel> plain =
        build_model(tiny_config(model_extra, "gradient_checkpointing: true"), kTinyGeometry, Device::cpu());
    const std::vector<Step> want = two_steps_and_inference(*plain);
    for (int n : {10, 19}) {
      std::shared_ptr<DiffusionModel> swapped = build_model(
          tiny_config(model_extra, "gradient_checkpointing: true, blocks_to_swap: " + std::to_string(n)),
          kTinyGeometry, Device::cpu());
      const BlockSwapper* swapper = swapped->block_swapper();
      ASSERT_NE(swapper, nullptr);
      ASSERT_EQ(swapper->n_blocks(), n);
      EXPECT_EQ(swapper->block_name(n - 1), "output_blocks.8");  // the last n blocks in execution order
      if (n == 10) {
        EXPECT_EQ(swapper->block_name(0), "middle_block");
      }
      expect_bitwise_equal(two_steps_and_inference(*swapped), want, label + ", " + std::to_string(n) + " swapped");
      const BlockSwapper::Stats stats = swapper->stats();
      int64_t largest = 0, all = 0;
      for (int k = 0; k < n; ++k) largest = std::max(largest, swapper->block_bytes(k)), all += swapper->block_bytes(k);
      std::printf("[SDXL swap, %s, %d blocks] %lld block copies, %lld prefetch hits, %lld bytes copied (%lld per "
                  "pass), peak resident %lld (largest block %lld)\n",
                  label.c_str(), n, static_cast<long long>(stats.n_block_copies),
                  static_cast<long long>(stats.n_prefetch_hits), static_cast<long long>(stats.bytes_copied),
                  static_cast<long long>(all), static_cast<long long>(stats.peak_resident_bytes),
                  static_cast<long long>(largest));
      // Two training steps copy every swapped block for the forward and for the recomputation, the inference forward
      // once more: 5 copies a block, but input_blocks.0 (conv_in: no adapter, an input without a gradient) is not
      // recomputed. Backward recomputes the blocks in reverse execution order (the skips join no earlier), so every
      // acquire finds its block prefetched but the very first.
      EXPECT_EQ(stats.n_block_copies, 5 * n - (n == 19 ? 2 : 0)) << label << ", " << n;
      EXPECT_EQ(stats.n_prefetch_hits, stats.n_block_copies - 1) << label << ", " << n;
      EXPECT_LE(stats.peak_resident_bytes, 2 * largest) << label << ", " << n;
      EXPECT_GT(stats.peak_resident_bytes, 0);
      EXPECT_EQ(stats.resident_bytes, 0) << "the inference forward leaves no copy alive";
      MemoryInputs in{.batch_size = 2, .latent_height = 16, .latent_width = 16, .text_length = 7, .text_dim = 32,
                      .latent_channels = 4, .pooled_dim = 16, .gradient_checkpointing = true, .optimizer = "adamw"};
      in.blocks_to_swap = n;
      const MemoryEstimate estimate = estimate_training_memory(*swapped, in);
      EXPECT_EQ(estimate.swapped_weights, all) << label << ", " << n;
      EXPECT_EQ(estimate.swap_buffers, 2 * largest) << label << ", " << n;
    }
  }
}

TEST(SdxlBlockSwap, RefusesWhatCannotWork) {
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
  expect_config_error("gradient_checkpointing: true, blocks_to_swap: 20", "more than the model's 19 blocks");
}

}  // namespace
}  // namespace wick::sdxl
