// What only the SDXL UNet (models/sdxl) has, against the fixtures of tests/data/sdxl (tests/reference/
// make_sdxl_fixtures.py, diffusers 0.42.1; a tiny random 3-level UNet, model_channels 8, context 32, pooled 16 + 6
// size sinusoids of 8, 4 GroupNorm groups): its config read from the weights' shapes (and SD 1.x / 2.x UNets' real
// sizes), the time in thousandths and the size conditioning, the LoRA presets and LoCon's conv targets in the
// registry, the input checks. What every architecture shows (forward in f32 and bf16 against diffusers, from the LDM
// file and the diffusers folder; the tiny file holding exactly the config's parameters; LoRA + LoCon and DoRA against
// PEFT; gradient checkpointing) is SDXL's row of arch_parity_test.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>

#include "models/nn/adapters.h"
#include "models/nn/conv.h"
#include "models/registry.h"
#include "models/sdxl/sdxl_blocks.h"
#include "models/sdxl/sdxl_unet.h"
#include "models/sdxl/sdxl_weights.h"
#include "models/weights/weight_source.h"
#include "runtime/safetensors.h"
#include "tests/error_of.h"
#include "tests/models/arch_parity.h"
#include "tests/models/arch_test_util.h"
#include "tests/test_data.h"

namespace wick::sdxl {
namespace {

using ::testing::HasSubstr;
using wick::testing::error_of;
using wick::testing::LoadedModel;
using wick::testing::lora_paths;
using wick::testing::parity_arch;
using wick::testing::relative_to_max;
using wick::testing::shape_map_error;

const ConfigHints kTinyHints{.head_dim = 8, .norm_groups = 4, .size_embed_dim = 8};

std::string fixture_path(const std::string& name) { return wick::testing::test_data_dir() + "/sdxl/" + name; }
SafetensorsFile open_fixture(const std::string& name) { return SafetensorsFile::open(fixture_path(name)); }

std::map<std::string, Shape> ldm_shapes(const WeightSource& source) {
  return mapped_shapes(source, detect_weight_format(source));
}

bool spatial_conv(const Module& m) {
  const auto* conv = dynamic_cast<const nn::Conv2d*>(&m);
  return conv != nullptr && conv->kernel_size() > 1;
}

TEST(SdxlConfig, FromShapesOfTheTinyUnet) {
  WeightSource source = WeightSource::open(fixture_path("tiny_ldm.safetensors"));
  const std::map<std::string, Shape> shapes = ldm_shapes(source);
  EXPECT_EQ(shapes.count("first_stage_model.decoder.conv_in.weight"), 0u) << "the VAE beside the UNet is not read";
  const UnetConfig c = config_from_shapes(shapes, kTinyHints);
  EXPECT_EQ(c.in_channels, 4);
  EXPECT_EQ(c.out_channels, 4);
  EXPECT_EQ(c.model_channels, 8);
  EXPECT_EQ(c.channel_mult, (std::vector<int64_t>{1, 2, 2}));
  EXPECT_EQ(c.num_res_blocks, 2);
  EXPECT_EQ(c.transformer_depth, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(c.transformer_depth_middle, 2);
  EXPECT_EQ(c.time_embed_dim, 32);
  EXPECT_EQ(c.context_dim, 32);
  EXPECT_EQ(c.adm_in_channels, 64);
  EXPECT_EQ(c.pooled_dim(), 16);
  EXPECT_TRUE(c.linear_projection);
  EXPECT_EQ(c.heads(16), 2);
  UnetConfig built = c;
  built.dtype = DType::F32;
  Unet model(built);
  EXPECT_EQ(model.summary(), "SDXL-like UNet (3 levels 8/16/16, transformer depth 0/1/2, middle 2, f32)");
  // The index arithmetic: level 1's first resnet is input_blocks.4, the upsamplers sit after the transformers.
  EXPECT_EQ(input_block_index(c, 1, 0), 4);
  EXPECT_EQ(downsample_index(c, 0), 3);
  EXPECT_EQ(output_block_index(c, 2, 0), 0);
  EXPECT_EQ(upsample_path(c, 2), "output_blocks.2.2.conv");
  EXPECT_EQ(upsample_path(c, 1), "output_blocks.5.2.conv");
}

TEST(SdxlConfig, RealSizes) {
  // Parameter counts as diffusers' UNet2DConditionModel has them (SDXL base's config; SD 1.5's and SD 2.1's).
  struct Expected {
    UnetConfig config;
    const char* name;
    int64_t n_parameters;
  };
  UnetConfig sd15{.channel_mult = {1, 2, 4, 4}, .transformer_depth = {1, 1, 1, 0}, .transformer_depth_middle = 1,
                  .head_dim = 0, .num_heads = 8, .context_dim = 768, .adm_in_channels = 0, .linear_projection = false};
  UnetConfig sd21 = sd15;
  sd21.head_dim = 64, sd21.num_heads = 0, sd21.context_dim = 1024, sd21.linear_projection = true;
  for (const Expected& e : {Expected{UnetConfig::sdxl_base(), "SDXL base", 2567463684},
                            Expected{sd15, "SD 1.x UNet", 859520964}, Expected{sd21, "SD 2.x UNet", 865910724}}) {
    SCOPED_TRACE(e.name);
    const std::map<std::string, Shape> shapes = parameter_shapes(e.config);
    int64_t n = 0;
    for (auto& [name, shape] : shapes) n += numel(shape);
    EXPECT_EQ(n, e.n_parameters);
    EXPECT_EQ(variant_name(e.config), e.name);
    const UnetConfig back =
        config_from_shapes(shapes, {.head_dim = e.config.head_dim, .num_heads = e.config.num_heads});
    EXPECT_EQ(back.channel_mult, e.config.channel_mult);
    EXPECT_EQ(back.transformer_depth, e.config.transformer_depth);
    EXPECT_EQ(back.transformer_depth_middle, e.config.transformer_depth_middle);
    EXPECT_EQ(back.linear_projection, e.config.linear_projection);
    EXPECT_EQ(back.adm_in_channels, e.config.adm_in_channels);
    EXPECT_EQ(parameter_shapes(back), shapes);
  }
  const std::map<std::string, Shape> base = parameter_shapes(UnetConfig::sdxl_base());
  EXPECT_EQ(base.size(), 1680u);
  EXPECT_EQ(base.at("label_emb.0.0.weight"), (Shape{1280, 2816}));
  EXPECT_EQ(base.at("input_blocks.4.1.transformer_blocks.1.attn2.to_k.weight"), (Shape{640, 2048}));
  EXPECT_EQ(base.count("input_blocks.4.1.transformer_blocks.2.attn1.to_q.weight"), 0u);
  EXPECT_EQ(base.at("input_blocks.7.1.transformer_blocks.9.ff.net.0.proj.weight"), (Shape{10240, 1280}));
  EXPECT_EQ(base.at("output_blocks.0.0.in_layers.2.weight"), (Shape{1280, 2560, 3, 3}));
  EXPECT_EQ(base.at("output_blocks.2.0.skip_connection.weight"), (Shape{1280, 1920, 1, 1}));
  EXPECT_EQ(base.at("output_blocks.2.2.conv.weight"), (Shape{1280, 1280, 3, 3}));
  EXPECT_EQ(base.at("output_blocks.5.2.conv.weight"), (Shape{640, 640, 3, 3}));
  EXPECT_EQ(base.at("output_blocks.8.0.skip_connection.weight"), (Shape{320, 640, 1, 1}));
  EXPECT_EQ(base.count("output_blocks.8.1.proj_in.weight"), 0u);
  EXPECT_EQ(base.at("middle_block.1.transformer_blocks.9.attn1.to_out.0.bias"), (Shape{1280}));
  // SD 1.x: the upsampler of its attention-less last level sits in slot 1; 1x1-conv projections.
  const std::map<std::string, Shape> v1 = parameter_shapes(sd15);
  EXPECT_EQ(v1.at("output_blocks.2.1.conv.weight"), (Shape{1280, 1280, 3, 3}));
  EXPECT_EQ(v1.at("input_blocks.1.1.proj_in.weight"), (Shape{320, 320, 1, 1}));
}

TEST(SdxlConfig, BrokenShapeMapsAreDataErrors) {
  const std::map<std::string, Shape> good = ldm_shapes(WeightSource::open(fixture_path("tiny_ldm.safetensors")));
  // Shapes that do not fit are Data errors; hints (model: keys) that do not fit the shapes are Config errors.
  auto message = [](const std::map<std::string, Shape>& shapes, ConfigHints hints = kTinyHints,
                    ErrorKind kind = ErrorKind::Data) {
    return shape_map_error([&](const auto& s) { config_from_shapes(s, hints); }, shapes, kind);
  };
  auto without = [&](const std::string& name) { return wick::testing::without(good, name); };
  auto with = [&](const std::string& name, Shape shape) {
    return wick::testing::with(good, name, std::move(shape));
  };
  EXPECT_THAT(message(without("input_blocks.0.0.weight")), HasSubstr("'input_blocks.0.0.weight' is missing"));
  EXPECT_THAT(message(without("output_blocks.4.1.transformer_blocks.0.norm2.bias")),
              HasSubstr("'output_blocks.4.1.transformer_blocks.0.norm2.bias' is missing"));
  EXPECT_THAT(message(with("output_blocks.0.0.in_layers.2.weight", {16, 31, 3, 3})),
              HasSubstr("'output_blocks.0.0.in_layers.2.weight' has shape [16, 31, 3, 3]"));
  EXPECT_THAT(message(with("input_blocks.4.1.proj_out.weight", {16, 16, 1, 1})),
              HasSubstr("a 1x1-conv projection is [C, C, 1, 1]"));
  EXPECT_THAT(message(with("output_blocks.1.1.transformer_blocks.2.extra", {1})),
              HasSubstr("'output_blocks.1.1.transformer_blocks.2.extra'"));
  EXPECT_THAT(message(good, {.head_dim = 3, .norm_groups = 4, .size_embed_dim = 8}, ErrorKind::Config),
              HasSubstr("do not split into heads of 3 (model.head_dim)"));
  EXPECT_THAT(message(good, {.head_dim = 8, .norm_groups = 3, .size_embed_dim = 8}, ErrorKind::Config),
              HasSubstr("do not split into 3 GroupNorm groups"));
  EXPECT_THAT(message(good, {.head_dim = 8, .norm_groups = 4, .size_embed_dim = 16}, ErrorKind::Config),
              HasSubstr("is not a pooled vector + 6 sinusoids of 16"));
  std::map<std::string, Shape> prefixed;
  for (auto& [name, shape] : good) prefixed["model.diffusion_model." + name] = shape;
  EXPECT_THAT(message(prefixed), HasSubstr("strip that prefix"));
  EXPECT_THAT(message({{"down_blocks.0.resnets.0.conv1.weight", {8, 8, 3, 3}}}), HasSubstr("diffusers'"));
}

TEST(SdxlForward, PredictTakesTimeOverAThousand) {
  LoadedModel loaded = parity_arch("sdxl").load("tiny_ldm.safetensors");
  Unet& unet = dynamic_cast<Unet&>(*loaded.model);
  SafetensorsFile file = open_fixture("case.safetensors");
  const Tensor timesteps = file.get("timesteps");
  diffusion::Conditioning cond{.context = file.get("context"), .pooled = file.get("pooled"),
                               .size_ids = file.get("time_ids")};
  // t / 1000 in f32 does not always multiply back exactly (127, 251, ...): the UNet rounds to the integer.
  Tensor time = Tensor::from_vector<float>({127.0f / 1000.0f, 999.0f / 1000.0f}, {2});
  Tensor by_time = unet.predict(file.get("latents_wide"), time, cond);
  Tensor direct = unet.forward(file.get("latents_wide"), Tensor::from_vector<float>({127.0f, 999.0f}, {2}),
                               cond.context, cond.pooled, cond.size_ids);
  EXPECT_EQ(by_time.to_vector<float>(), direct.to_vector<float>());
  // Without size_ids: each sample at its own size (8h, 8w), uncropped.
  Tensor sizes = default_size_conditioning(2, 8, 12, Device::cpu());
  EXPECT_EQ(sizes.to_vector<float>(), (std::vector<float>{64, 96, 0, 0, 64, 96, 64, 96, 0, 0, 64, 96}));
  cond.size_ids = Tensor();
  Tensor defaulted = unet.forward(file.get("latents_wide"), timesteps, cond.context, cond.pooled, Tensor());
  Tensor explicit_sizes = unet.forward(file.get("latents_wide"), timesteps, cond.context, cond.pooled, sizes);
  EXPECT_EQ(defaulted.to_vector<float>(), explicit_sizes.to_vector<float>());
  // The micro-conditioning matters (and its order: swapping h and w within a pair changes the output).
  Tensor swapped = Tensor::from_vector<float>({768, 1024, 0, 0, 128, 128, 896, 640, 16, 32, 96, 64}, {2, 6});
  Tensor out = unet.forward(file.get("latents_square"), timesteps, cond.context, cond.pooled, swapped);
  EXPECT_GT(relative_to_max(out, file.get("output_square")), 1e-3);
}

TEST(SdxlLora, PresetsAndConvTargetsWrapKohyasModules) {
  const Architecture& arch = find_architecture("sdxl");
  EXPECT_EQ(&find_architecture("SDXL_base"), &arch);
  EXPECT_EQ(arch.default_preset(), "all");
  auto wrapped = [&](const std::vector<std::string>& patterns, std::function<bool(const Module&)> accepts = {}) {
    LoadedModel loaded = parity_arch("sdxl").load("tiny_ldm.safetensors");
    std::vector<std::string> out =
        nn::apply_adapters(*loaded.model, {.patterns = patterns, .options = {.rank = 2}, .accepts = accepts}).wrapped;
    std::sort(out.begin(), out.end());
    return out;
  };
  const std::vector<std::string> all = wrapped(arch.targets({"all"}));
  // Every Linear of the 2·1 + 2·2 (down) + 2 (middle) + 3·2 + 3·1 (up) = 17 transformer blocks (10 each) and the 2
  // projections of the 11 transformers.
  EXPECT_EQ(all.size(), 17u * 10 + 11u * 2);
  EXPECT_THAT(all, ::testing::Contains("input_blocks.4.1.transformer_blocks.0.attn1.to_q"));
  EXPECT_THAT(all, ::testing::Contains("middle_block.1.transformer_blocks.1.ff.net.0.proj"));
  EXPECT_THAT(all, ::testing::Contains("output_blocks.5.1.proj_out"));
  EXPECT_EQ(wrapped(arch.targets({"attention"})).size(), 17u * 8);
  EXPECT_EQ(wrapped(arch.targets({"attention_mlp"})).size(), 17u * 10);
  // The fixture's LoCon set = kohya's: all + the conv targets.
  std::vector<std::string> locon = arch.targets({});
  const std::vector<std::string> conv = arch.conv_targets();
  locon.insert(locon.end(), conv.begin(), conv.end());
  EXPECT_EQ(wrapped(locon), lora_paths(open_fixture("lora_case.safetensors"), "ldm."));
  const std::vector<std::string> spatial = wrapped(conv, spatial_conv);
  EXPECT_EQ(spatial.size(), 38u);  // conv1 + conv2 of 17 resnets, 2 downsamplers, 2 upsamplers
  EXPECT_THAT(spatial, ::testing::Contains("output_blocks.2.2.conv"));
  EXPECT_THAT(spatial, ::testing::Contains("input_blocks.6.0.op"));
}

TEST(SdxlForward, BadInputsAreClearErrors) {
  LoadedModel loaded = parity_arch("sdxl").load("tiny_ldm.safetensors");
  SafetensorsFile file = open_fixture("case.safetensors");
  const Tensor latents = file.get("latents_square"), t = file.get("timesteps"), context = file.get("context"),
               pooled = file.get("pooled"), ids = file.get("time_ids");
  Unet& m = dynamic_cast<Unet&>(*loaded.model);
  EXPECT_THAT(error_of([&] { m.forward(latents.narrow(2, 0, 14).contiguous(), t, context, pooled, ids); }),
              HasSubstr("must be multiples of 4"));
  EXPECT_THAT(error_of([&] { m.forward(latents.narrow(1, 0, 3).contiguous(), t, context, pooled, ids); }),
              HasSubstr("this UNet takes 4"));
  EXPECT_THAT(error_of([&] { m.forward(latents, t, context.narrow(2, 0, 31).contiguous(), pooled, ids); }),
              HasSubstr("is not [2, L, 32]"));
  EXPECT_THAT(error_of([&] { m.forward(latents, t, context, pooled.narrow(1, 0, 15).contiguous(), ids); }),
              HasSubstr("is not [2, 16]"));
  EXPECT_THAT(error_of([&] { m.forward(latents, t, context, pooled, ids.narrow(1, 0, 4).contiguous()); }),
              HasSubstr("is not a floating [2, 6]"));
  EXPECT_THAT(error_of([&] { m.forward(latents, t.narrow(0, 0, 1).contiguous(), context, pooled, ids); }),
              HasSubstr("timesteps"));
  EXPECT_THAT(error_of([&] { m.check_latent_size(16, 10); }), HasSubstr("multiples of 4 (images: multiples of 32"));
  m.check_latent_size(8, 12);
}

}  // namespace
}  // namespace wick::sdxl
