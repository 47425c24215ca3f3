// What only SD3's MMDiT (models/sd3) has, against the fixtures of tests/data/sd3 (tests/reference/
// make_sd3_fixtures.py, diffusers 0.42.1; tiny random medium, large and sd3 variants, hidden 32, 4 heads of 8, patch 2,
// a 6x6 position table): its config read from the weights' shapes, the cropped position table and unpatchify, the
// LoRA presets and aliases in the registry, the input checks. What every architecture shows (forward in f32 and bf16
// against diffusers, the tiny files holding exactly the config's parameters, LoRA and DoRA against PEFT, gradient
// checkpointing) is SD3's row of arch_parity_test.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>

#include "engine/autograd/node.h"
#include "models/nn/adapters.h"
#include "models/registry.h"
#include "models/sd3/sd3.h"
#include "models/sd3/sd3_blocks.h"
#include "runtime/ops/creation.h"
#include "runtime/safetensors.h"
#include "tests/error_of.h"
#include "tests/models/arch_parity.h"
#include "tests/models/arch_test_util.h"
#include "tests/test_data.h"

namespace wick::sd3 {
namespace {

using ::testing::HasSubstr;
using wick::testing::error_of;
using wick::testing::file_shapes;
using wick::testing::LoadedModel;
using wick::testing::lora_paths;
using wick::testing::parity_arch;
using wick::testing::shape_map_error;

const char* const kVariants[] = {"medium", "large", "sd3"};

SafetensorsFile open_fixture(const std::string& name) {
  return SafetensorsFile::open(wick::testing::test_data_dir() + "/sd3/" + name);
}

TEST(Sd3Config, FromShapesOfTheThreeVariants) {
  for (const char* variant : kVariants) {
    SCOPED_TRACE(variant);
    SafetensorsFile file = open_fixture(std::string(variant) + "_sai.safetensors");
    const std::map<std::string, Shape> shapes = file_shapes(file);
    Sd3Config c = config_from_shapes(shapes, 8);
    const std::string name = variant;
    EXPECT_EQ(c.patch_size, 2);
    EXPECT_EQ(c.in_channels, 16);
    EXPECT_EQ(c.out_channels, 16);
    EXPECT_EQ(c.hidden_size, 32);
    EXPECT_EQ(c.num_heads, 4);
    EXPECT_EQ(c.depth, name == "medium" ? 3 : 2);
    EXPECT_EQ(c.context_dim, 32);
    EXPECT_EQ(c.pooled_dim, 64);
    EXPECT_EQ(c.pos_embed_max_size, 6);
    EXPECT_EQ(c.mlp_hidden(), 128);
    EXPECT_EQ(c.qk_norm, name != "sd3");
    EXPECT_EQ(c.dual_attention_layers, name == "medium" ? std::vector<int64_t>({0, 1}) : std::vector<int64_t>{});
    c.dtype = DType::F32;
    MMDiT model(c);
    EXPECT_FALSE(autograd::requires_grad(model.parameter("pos_embed")));  // a buffer in SAI and diffusers
  }
  // With QK norm the head width comes from ln_q (no hint needed); without it SAI's 64 is assumed, which does not
  // divide the tiny sd3's hidden 32.
  EXPECT_EQ(config_from_shapes(file_shapes(open_fixture("large_sai.safetensors"))).num_heads, 4);
  EXPECT_THAT(error_of([] { config_from_shapes(file_shapes(open_fixture("sd3_sai.safetensors"))); }),
              HasSubstr("not a multiple of the head width 64"));
}

TEST(Sd3Config, RealSizeNamesAndCounts) {
  struct Expected {
    Sd3Config config;
    const char* name;
    int64_t n_parameters;  // diffusers' SD3Transformer2DModel parameters + its pos_embed buffer (as in the file)
  };
  for (const Expected& e : {Expected{Sd3Config::large(), "SD3.5 Large", 8146280768},
                            Expected{Sd3Config::medium(), "SD3.5 Medium", 2469663936}}) {
    SCOPED_TRACE(e.name);
    std::map<std::string, Shape> shapes = parameter_shapes(e.config);
    int64_t n = 0;
    for (auto& [name, shape] : shapes) n += numel(shape);
    EXPECT_EQ(n, e.n_parameters);
    EXPECT_EQ(variant_name(e.config), e.name);
    const Sd3Config back = config_from_shapes(shapes);
    EXPECT_EQ(back.depth, e.config.depth);
    EXPECT_EQ(back.num_heads, e.config.num_heads);
    EXPECT_EQ(back.pos_embed_max_size, e.config.pos_embed_max_size);
    EXPECT_EQ(back.dual_attention_layers, e.config.dual_attention_layers);
  }
  const std::map<std::string, Shape> large = parameter_shapes(Sd3Config::large());
  EXPECT_EQ(large.at("x_embedder.proj.weight"), (Shape{2432, 16, 2, 2}));
  EXPECT_EQ(large.at("pos_embed"), (Shape{1, 192 * 192, 2432}));
  EXPECT_EQ(large.at("context_embedder.weight"), (Shape{2432, 4096}));
  EXPECT_EQ(large.at("y_embedder.mlp.0.weight"), (Shape{2432, 2048}));
  EXPECT_EQ(large.at("joint_blocks.0.x_block.attn.ln_q.weight"), (Shape{64}));
  EXPECT_EQ(large.at("joint_blocks.37.context_block.adaLN_modulation.1.weight"), (Shape{2 * 2432, 2432}));
  EXPECT_EQ(large.count("joint_blocks.37.context_block.attn.proj.weight"), 0u);
  EXPECT_EQ(large.at("final_layer.linear.weight"), (Shape{64, 2432}));
  const std::map<std::string, Shape> medium = parameter_shapes(Sd3Config::medium());
  EXPECT_EQ(medium.at("joint_blocks.12.x_block.adaLN_modulation.1.weight"), (Shape{9 * 1536, 1536}));
  EXPECT_EQ(medium.at("joint_blocks.13.x_block.adaLN_modulation.1.weight"), (Shape{6 * 1536, 1536}));
  EXPECT_EQ(medium.count("joint_blocks.12.x_block.attn2.qkv.weight"), 1u);
  EXPECT_EQ(medium.count("joint_blocks.13.x_block.attn2.qkv.weight"), 0u);
  EXPECT_EQ(variant_name(Sd3Config{.hidden_size = 1536, .num_heads = 24, .depth = 24, .qk_norm = false}), "SD3 Medium");
}

TEST(Sd3Config, BrokenShapeMapsAreDataErrors) {
  const std::map<std::string, Shape> good = file_shapes(open_fixture("medium_sai.safetensors"));
  auto message = [](const std::map<std::string, Shape>& shapes, int64_t head_dim = 0) {
    return shape_map_error([&](const auto& s) { config_from_shapes(s, head_dim); }, shapes);
  };
  auto without = [&](const std::string& name) { return wick::testing::without(good, name); };
  auto with = [&](const std::string& name, Shape shape) {
    return wick::testing::with(good, name, std::move(shape));
  };
  EXPECT_THAT(message(without("x_embedder.proj.weight")), HasSubstr("'x_embedder.proj.weight' is missing"));
  EXPECT_THAT(message(without("joint_blocks.1.context_block.mlp.fc2.bias")),
              HasSubstr("'joint_blocks.1.context_block.mlp.fc2.bias' is missing"));
  EXPECT_THAT(message(with("pos_embed", {1, 35, 32})), HasSubstr("is not [1, max², 32]"));
  EXPECT_THAT(message(with("joint_blocks.2.x_block.mlp.fc2.weight", {32, 100})),
              HasSubstr("'joint_blocks.2.x_block.mlp.fc2.weight' has shape [32, 100]"));
  EXPECT_THAT(message(good, 16), HasSubstr("model.head_dim is 16 but joint_blocks.0.x_block.attn.ln_q.weight gives 8"));
  // Dual attention: an attn2 tensor without attn2.qkv (SAI's loader reads attn2 from ln_k), attn2 with a 6-way
  // modulation, and a 9-way modulation without attn2: refused as inconsistent.
  EXPECT_THAT(message(without("joint_blocks.0.x_block.attn2.qkv.weight")),
              HasSubstr("dual attention (attn2) of block 0 is inconsistent"));
  EXPECT_THAT(message(with("joint_blocks.1.x_block.adaLN_modulation.1.weight", {6 * 32, 32})),
              HasSubstr("the file's attn2 is inconsistent"));
  auto no_attn2 = good;
  for (auto it = no_attn2.begin(); it != no_attn2.end();)
    it = it->first.rfind("joint_blocks.1.x_block.attn2.", 0) == 0 ? no_attn2.erase(it) : std::next(it);
  EXPECT_THAT(message(no_attn2), HasSubstr("'joint_blocks.1.x_block.adaLN_modulation.1.bias' has shape [288]"));
  EXPECT_THAT(message(no_attn2), HasSubstr("the file's attn2 is inconsistent"));
  EXPECT_THAT(message(with("joint_blocks.0.x_block.extra", {1})), HasSubstr("'joint_blocks.0.x_block.extra'"));
  std::map<std::string, Shape> prefixed;
  for (auto& [name, shape] : good) prefixed["model.diffusion_model." + name] = shape;
  EXPECT_THAT(message(prefixed), HasSubstr("strip that prefix"));
  EXPECT_THAT(message({{"transformer_blocks.0.attn.to_q.weight", {32, 32}}}), HasSubstr("diffusers'"));
}

TEST(Sd3Positions, CropIsTheCentreWindowAndUnpatchifyIsPQC) {
  // A 5x5 table of 2-wide rows whose values name their (row, column).
  std::vector<float> values;
  for (int r = 0; r < 5; ++r)
    for (int c = 0; c < 5; ++c) values.insert(values.end(), {static_cast<float>(r), static_cast<float>(c)});
  Tensor table = Tensor::from_vector<float>(values, {1, 25, 2});
  // 2 x 3 patches: top (5 - 2) / 2 = 1, left (5 - 3) / 2 = 1.
  EXPECT_EQ(crop_position_table(table, 5, 2, 3).to_vector<float>(),
            (std::vector<float>{1, 1, 1, 2, 1, 3, 2, 1, 2, 2, 2, 3}));
  // 4 x 1: top 0, left 2.
  EXPECT_EQ(crop_position_table(table, 5, 4, 1).to_vector<float>(), (std::vector<float>{0, 2, 1, 2, 2, 2, 3, 2}));
  EXPECT_EQ(crop_position_table(table, 5, 5, 5).to_vector<float>(), values);
  EXPECT_THAT(error_of([&] { crop_position_table(table, 5, 6, 2); }),
              HasSubstr("a latent of 6x2 patches does not fit the position table of 5x5"));
  // Tokens [1, h·w = 2, p·p·C = 8] (p = 2, C = 2) with value 100·token + feature: out[c, 2·i + p, 2·j + q] =
  // token (i, j), feature (p·2 + q)·2 + c.
  std::vector<float> tokens;
  for (int t = 0; t < 2; ++t)
    for (int f = 0; f < 8; ++f) tokens.push_back(static_cast<float>(100 * t + f));
  Tensor image = unpatchify(Tensor::from_vector<float>(tokens, {1, 2, 8}), 2, 1, 2);
  EXPECT_EQ(image.shape(), (Shape{1, 2, 2, 4}));
  EXPECT_EQ(image.to_vector<float>(),
            (std::vector<float>{0, 2, 100, 102, 4, 6, 104, 106, 1, 3, 101, 103, 5, 7, 105, 107}));
}

TEST(Sd3Lora, PresetsWrapTheirModules) {
  const Architecture& arch = find_architecture("sd3.5");
  EXPECT_EQ(arch.name(), "sd3");
  EXPECT_EQ(&find_architecture("mmdit"), &arch);
  EXPECT_EQ(&find_architecture("SD35"), &arch);
  EXPECT_EQ(arch.default_preset(), "all");
  auto wrapped = [&](const std::string& preset) {
    LoadedModel loaded = parity_arch("sd3").load("medium_sai.safetensors");
    std::vector<std::string> out =
        nn::apply_adapters(*loaded.model, {.patterns = arch.targets({preset}), .options = {.rank = 4}}).wrapped;
    std::sort(out.begin(), out.end());
    return out;
  };
  // all = every Linear of the blocks, adaLN included: exactly the fixture's 31 modules.
  EXPECT_EQ(wrapped("all"), lora_paths(open_fixture("medium_lora_case.safetensors"), "sai."));
  const std::vector<std::string> attention = wrapped("attention");
  // x qkv + proj in 3 blocks, context qkv in 3 and proj in 2 (none in the pre-only block), attn2 qkv + proj in 2.
  EXPECT_EQ(attention.size(), 3u * 2 + 3u + 2u + 2u * 2);
  EXPECT_THAT(attention, ::testing::Contains("joint_blocks.1.x_block.attn2.qkv"));
  EXPECT_THAT(attention, ::testing::Contains("joint_blocks.2.context_block.attn.qkv"));
  EXPECT_EQ(wrapped("attention_mlp").size(), attention.size() + 3u * 2 + 2u * 2);  // fc1, fc2: x in 3, context in 2
}

TEST(Sd3Forward, BadInputsAreClearErrors) {
  LoadedModel medium = parity_arch("sd3").load("medium_sai.safetensors");
  SafetensorsFile file = open_fixture("medium_case.safetensors");
  const Tensor latents = file.get("latents_square"), sigma = file.get("sigma"), context = file.get("context"),
               pooled = file.get("pooled");
  MMDiT& m = dynamic_cast<MMDiT&>(*medium.model);
  EXPECT_THAT(error_of([&] { m.forward(latents.narrow(2, 0, 7).contiguous(), sigma, context, pooled); }),
              HasSubstr("multiples of the patch size 2"));
  EXPECT_THAT(error_of([&] { m.forward(latents.narrow(1, 0, 4).contiguous(), sigma, context, pooled); }),
              HasSubstr("this model takes 16"));
  EXPECT_THAT(error_of([&] { m.forward(latents, sigma, context.narrow(2, 0, 31).contiguous(), pooled); }),
              HasSubstr("is not [2, L, 32]"));
  EXPECT_THAT(error_of([&] { m.forward(latents, sigma, context, pooled.narrow(1, 0, 63).contiguous()); }),
              HasSubstr("is not [2, 64]"));
  EXPECT_THAT(error_of([&] { m.forward(latents, sigma.narrow(0, 0, 1).contiguous(), context, pooled); }),
              HasSubstr("timesteps"));
  // Larger than the 6x6 table: a Config error naming the limit (also before training, check_latent_size).
  Tensor big = zeros({2, 16, 14, 8}, DType::F32);
  const std::string too_big = error_of([&] { m.forward(big, sigma, context, pooled); });
  EXPECT_THAT(too_big, HasSubstr("7x4 patches"));
  EXPECT_THAT(too_big, HasSubstr("position table of 6x6 patches"));
  EXPECT_THAT(error_of([&] { m.check_latent_size(12, 14); }), HasSubstr("at most 12x12 latents"));
  EXPECT_THAT(error_of([&] { m.check_latent_size(12, 9); }), HasSubstr("multiples of the patch size 2"));
  m.check_latent_size(12, 4);  // non-square, within the table
  EXPECT_EQ(m.summary(), "SD3 (MMDiT) (3 joint blocks, hidden 32, 4 heads, QK norm, attn2 in 2 blocks, f32)");
}

}  // namespace
}  // namespace wick::sd3
