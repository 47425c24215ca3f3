// The memory plan (models/memory/memory_plan.h) on the tiny Flux dev model (tests/data/flux), and on the tiny SD3.5
// Medium-like MMDiT (tests/data/sd3) and SDXL UNet (tests/data/sdxl): the cheapest candidate that fits the budget,
// settings the config fixes kept, and the refusal when nothing fits.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "engine/config/train_config.h"
#include "models/memory/memory_plan.h"
#include "models/model_factory.h"
#include "models/registry.h"
#include "tests/test_data.h"

namespace wick {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<DiffusionModel> tiny_flux() {
  const std::string yaml = "name: plan\ndevice: cpu\nmodel: {arch: flux, axes_dim: [4, 6, 6], name_or_path: " +
                           wick::testing::test_data_dir() + "/flux/dev_bfl.safetensors}\n"
                           "network: {type: lora, linear: 4}\ndataset: {path: unused.h5}\n";
  const DataGeometry geometry{
      .latent_channels = 4, .latent_sizes = {{6, 10}}, .text_length = 7, .text_dim = 32, .pooled_dim = 24};
  return build_model(parse_config_string(yaml, "<test>", config_schema()), geometry, Device::cpu());
}

const MemoryInputs kInputs{.batch_size = 2, .latent_height = 6, .latent_width = 10, .text_length = 7,
                           .text_dim = 32, .latent_channels = 4, .pooled_dim = 24, .optimizer = "adamw"};

int64_t estimate(const DiffusionModel& model, bool checkpointing, bool float8, int64_t swap) {
  MemoryInputs in = kInputs;
  in.gradient_checkpointing = checkpointing, in.float8 = float8, in.blocks_to_swap = swap;
  return estimate_training_memory(model, in).total;
}

TEST(MemoryPlan, CheapestCandidateThatFits) {
  std::shared_ptr<DiffusionModel> model = tiny_flux();
  const int64_t plain = estimate(*model, false, false, 0), ckpt = estimate(*model, true, false, 0),
                float8 = estimate(*model, true, true, 0), swap4 = estimate(*model, true, true, 4);
  ASSERT_GT(plain, ckpt);
  ASSERT_GT(ckpt, float8);
  ASSERT_GT(float8, swap4);
  struct Case {
    int64_t budget;
    bool checkpointing, float8;
    int64_t swap;
  };
  for (const Case& c : {Case{plain, false, false, 0}, Case{plain - 1, true, false, 0}, Case{ckpt - 1, true, true, 0},
                        Case{swap4, true, true, 4}}) {
    const MemoryPlan plan = plan_memory(*model, kInputs, {}, c.budget, "test budget");
    EXPECT_TRUE(plan.fits) << c.budget;
    EXPECT_EQ(plan.gradient_checkpointing, c.checkpointing) << c.budget;
    EXPECT_EQ(plan.float8, c.float8) << c.budget;
    EXPECT_EQ(plan.blocks_to_swap, c.swap) << c.budget;
    EXPECT_LE(plan.estimate.total, c.budget);
    // Checkpointing reruns the blocks' forward: nearly all of the tiny Flux's FLOPs.
    if (c.checkpointing) {
      EXPECT_GT(plan.slowdown, 1.30);
      EXPECT_LT(plan.slowdown, 4.0 / 3.0);
    } else {
      EXPECT_EQ(plan.slowdown, 1.0);
    }
    EXPECT_THAT(describe(plan), HasSubstr("of the " + format_bytes(c.budget) + " test budget"));
  }
}

// distributed.shard: auto over several ranks: after checkpointing, sharding the blocks' weights (exact, only
// traffic) comes before a float8 base; on one rank it is never chosen; a config that fixes the level keeps it.
TEST(MemoryPlan, ShardsTheWeightsBeforeQuantizingOnSeveralRanks) {
  std::shared_ptr<DiffusionModel> model = tiny_flux();
  // Over 2 ranks the tiny Flux's 4 blocks save less than the two gathered blocks' buffers cost: the plan skips
  // sharding there (checked below); over 4 ranks it saves.
  MemoryInputs two = kInputs;
  two.world_size = 4;
  auto total = [&](bool shard, bool float8) {
    MemoryInputs in = two;
    in.gradient_checkpointing = true, in.shard_weights = shard, in.float8 = float8;
    return estimate_training_memory(*model, in).total;
  };
  const int64_t ckpt = total(false, false), sharded = total(true, false), both = total(true, true);
  ASSERT_GT(ckpt, sharded);
  ASSERT_GT(sharded, both);
  const MemoryPlan plan = plan_memory(*model, two, {}, ckpt - 1, "test budget");
  EXPECT_TRUE(plan.fits);
  EXPECT_TRUE(plan.gradient_checkpointing);
  EXPECT_TRUE(plan.shard_weights);
  EXPECT_FALSE(plan.float8);
  EXPECT_EQ(plan.estimate.total, sharded);
  EXPECT_GT(plan.bytes_gathered_per_step, 0);
  EXPECT_THAT(describe(plan), HasSubstr("the blocks' weights sharded over 4 ranks"));
  const MemoryPlan tighter = plan_memory(*model, two, {}, sharded - 1, "test budget");
  EXPECT_TRUE(tighter.shard_weights);
  EXPECT_TRUE(tighter.float8);
  // Two ranks: sharding would cost more than it saves; the plan goes on to float8 without it.
  MemoryInputs pair = kInputs;
  pair.world_size = 2;
  const MemoryPlan skipped = plan_memory(*model, pair, {}, estimate(*model, true, false, 0) - 1, "test budget");
  EXPECT_FALSE(skipped.shard_weights);
  EXPECT_TRUE(skipped.float8);
  // One rank: sharding saves nothing, float8 comes next.
  const MemoryPlan one = plan_memory(*model, kInputs, {}, estimate(*model, true, false, 0) - 1, "test budget");
  EXPECT_FALSE(one.shard_weights);
  EXPECT_TRUE(one.float8);
  // Fixed by the config (shard: optimizer): never sharded, and the refusal names the key.
  const MemoryPlan fixed = plan_memory(*model, two, {.shard_weights = false}, ckpt - 1, "test budget");
  EXPECT_FALSE(fixed.shard_weights);
  EXPECT_TRUE(fixed.float8);
  const MemoryPlan none = plan_memory(*model, two, {.shard_weights = false}, 1000, "test budget");
  EXPECT_FALSE(none.fits);
  EXPECT_THAT(refusal(none, {.shard_weights = false}), HasSubstr("distributed.shard"));
  // with_plan writes the choice into a shard: auto config, so a resumed run repeats it.
  TrainConfig config;
  config.network.type = NetworkType::Lora;
  config.distributed.shard_auto = true;
  const TrainConfig planned = with_plan(config, plan);
  EXPECT_FALSE(planned.distributed.shard_auto);
  EXPECT_TRUE(planned.distributed.shard_weights);
  EXPECT_FALSE(choices_of(config).shard_weights.has_value());
  EXPECT_EQ(choices_of(planned).shard_weights, std::optional<bool>(true));
}

// The same ladder for the other architectures with blocks: each candidate's estimate is below the one before, and
// a budget just under a candidate's predecessor gets that candidate. SDXL's float8 step quantizes its blocks'
// Linears only (its convolutions stay in the model's dtype), and its last blocks are the small level-0 ones, so
// swapping all 19 is what the last budget needs.
TEST(MemoryPlan, Sd3AndSdxlLadders) {
  struct Tiny {
    std::string arch, model_yaml;
    DataGeometry geometry;
    MemoryInputs inputs;
    int64_t n_blocks;
  };
  const std::string data = wick::testing::test_data_dir();
  const std::vector<Tiny> tinies = {
      {"sd3", "{arch: sd3, name_or_path: " + data + "/sd3/medium_sai.safetensors}",
       {.latent_channels = 16, .latent_sizes = {{8, 8}}, .text_length = 7, .text_dim = 32, .pooled_dim = 64},
       {.batch_size = 2, .latent_height = 8, .latent_width = 8, .text_length = 7, .text_dim = 32,
        .latent_channels = 16, .pooled_dim = 64, .optimizer = "adamw"},
       3},
      {"sdxl",
       "{arch: sdxl, head_dim: 8, norm_groups: 4, addition_time_embed_dim: 8, name_or_path: " + data +
           "/sdxl/tiny_ldm.safetensors}",
       {.latent_channels = 4, .latent_sizes = {{16, 16}}, .text_length = 7, .text_dim = 32, .pooled_dim = 16},
       {.batch_size = 2, .latent_height = 16, .latent_width = 16, .text_length = 7, .text_dim = 32,
        .latent_channels = 4, .pooled_dim = 16, .optimizer = "adamw"},
       19}};
  for (const Tiny& tiny : tinies) {
    SCOPED_TRACE(tiny.arch);
    const std::string yaml = "name: plan\ndevice: cpu\nmodel: " + tiny.model_yaml +
                             "\nnetwork: {type: lora, linear: 4}\ndataset: {path: unused.h5}\n";
    std::shared_ptr<DiffusionModel> model =
        build_model(parse_config_string(yaml, "<test>", config_schema()), tiny.geometry, Device::cpu());
    ASSERT_EQ(static_cast<int64_t>(model->block_paths().size()), tiny.n_blocks);
    auto total = [&](bool checkpointing, bool float8, int64_t swap) {
      MemoryInputs in = tiny.inputs;
      in.gradient_checkpointing = checkpointing, in.float8 = float8, in.blocks_to_swap = swap;
      return estimate_training_memory(*model, in);
    };
    const int64_t plain = total(false, false, 0).total, ckpt = total(true, false, 0).total,
                  float8 = total(true, true, 0).total, swap_all = total(true, true, tiny.n_blocks).total;
    ASSERT_GT(plain, ckpt);
    ASSERT_GT(ckpt, float8);
    ASSERT_GT(float8, swap_all);
    EXPECT_GT(total(true, true, 0).n_float8, 0);
    EXPECT_GT(total(true, true, tiny.n_blocks).swapped_weights, 0);
    struct Case {
      int64_t budget;
      bool checkpointing, float8;
      int64_t swap;
    };
    for (const Case& c : {Case{plain, false, false, 0}, Case{plain - 1, true, false, 0},
                          Case{ckpt - 1, true, true, 0}, Case{swap_all, true, true, tiny.n_blocks}}) {
      const MemoryPlan plan = plan_memory(*model, tiny.inputs, {}, c.budget, "test budget");
      EXPECT_TRUE(plan.fits) << c.budget;
      EXPECT_EQ(plan.gradient_checkpointing, c.checkpointing) << c.budget;
      EXPECT_EQ(plan.float8, c.float8) << c.budget;
      EXPECT_LE(plan.blocks_to_swap, c.swap) << c.budget;
      if (c.swap == 0) {
        EXPECT_EQ(plan.blocks_to_swap, 0) << c.budget;
      }
      EXPECT_LE(plan.estimate.total, c.budget);
      if (c.swap > 0) {  // the fewest blocks that fit: one fewer does not
        EXPECT_GT(plan.blocks_to_swap, 0);
        EXPECT_GT(total(true, true, plan.blocks_to_swap - 1).total, c.budget);
        EXPECT_GT(plan.bytes_streamed_per_step, 0);
      }
    }
    // Below every candidate's estimate: refused, with the smallest of them (not always all blocks swapped: two
    // blocks' buffers of the largest swapped block can outweigh what a small block frees).
    int64_t smallest = float8;
    for (int64_t n = 1; n <= tiny.n_blocks; ++n) smallest = std::min(smallest, total(true, true, n).total);
    const MemoryPlan refused = plan_memory(*model, tiny.inputs, {}, smallest - 1, "budget");
    EXPECT_FALSE(refused.fits);
    EXPECT_EQ(refused.estimate.total, smallest);
  }
}

TEST(MemoryPlan, FixedSettingsAreKeptAndNothingFittingIsRefused) {
  std::shared_ptr<DiffusionModel> model = tiny_flux();
  const int64_t ckpt = estimate(*model, true, false, 0);
  // model.quantize: none fixed: the plan swaps blocks of the unquantized base instead.
  const MemoryPlan no_float8 = plan_memory(*model, kInputs, {.float8 = false}, ckpt - 1, "budget");
  EXPECT_FALSE(no_float8.float8);
  EXPECT_GT(no_float8.blocks_to_swap, 0);
  // Checkpointing fixed off: no swapping (it needs checkpointing), float8 alone does not fit this budget.
  const int64_t budget = estimate(*model, false, true, 0) - 1;
  const MemoryPlan refused = plan_memory(*model, kInputs, {.gradient_checkpointing = false}, budget, "budget");
  EXPECT_FALSE(refused.fits);
  EXPECT_FALSE(refused.gradient_checkpointing);
  EXPECT_TRUE(refused.float8);  // the smallest estimate of the candidates left
  EXPECT_EQ(refused.blocks_to_swap, 0);
  const std::string message = refusal(refused, {.gradient_checkpointing = false});
  EXPECT_THAT(message, HasSubstr("no memory plan fits the " + format_bytes(budget) + " budget"));
  EXPECT_THAT(message, HasSubstr("The config fixes train.gradient_checkpointing: set them to auto"));
  // A fixed plan's choices go into the config as set values.
  TrainConfig config;
  const TrainConfig planned = with_plan(config, refused);
  EXPECT_EQ(planned.model.quantize, QuantizeMode::Float8);
  EXPECT_FALSE(planned.train.gradient_checkpointing_auto);
  EXPECT_EQ(planned.train.blocks_to_swap, 0);
}

}  // namespace
}  // namespace wick
