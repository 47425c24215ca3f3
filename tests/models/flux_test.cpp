// What only Flux's transformer (models/flux) has, against the fixtures of tests/data/flux (tests/reference/
// make_flux_fixtures.py, diffusers 0.42.1; tiny random dev and schnell, hidden 32, 2 heads of 16, 2 double + 2 single
// blocks, axes_dim [4, 6, 6], context 32, pooled 24, 4 latent channels): its config read from the weights' shapes,
// diffusers' latent packing, the block globs of its LoRA fixture, the input checks, the CPU step time. What every
// architecture shows (forward in f32 and bf16 against diffusers, the tiny files holding exactly the config's
// parameters, LoRA against PEFT, gradient checkpointing) is Flux's row of arch_parity_test.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include "models/flux/flux.h"
#include "models/nn/adapters.h"
#include "runtime/safetensors.h"
#include "tests/error_of.h"
#include "tests/models/arch_parity.h"
#include "tests/models/arch_test_util.h"
#include "tests/test_data.h"

namespace wick::flux {
namespace {

using ::testing::HasSubstr;
using wick::testing::error_of;
using wick::testing::LoadedModel;
using wick::testing::lora_paths;
using wick::testing::parity_arch;
using wick::testing::ParityArch;
using wick::testing::run_lora;
using wick::testing::shape_map_error;

const std::vector<int64_t> kTinyAxes = {4, 6, 6};

SafetensorsFile open_fixture(const std::string& name) {
  return SafetensorsFile::open(wick::testing::test_data_dir() + "/flux/" + name);
}

FluxTransformer& as_flux(const LoadedModel& loaded) { return dynamic_cast<FluxTransformer&>(*loaded.model); }

// The fixture's inputs.
struct Inputs {
  Tensor latents, timesteps, context, pooled, guidance;
};

Inputs case_inputs(const SafetensorsFile& file) {
  Inputs in{file.get("latents"), file.get("timestep"), file.get("context"), file.get("pooled"), Tensor()};
  if (file.contains("guidance")) in.guidance = file.get("guidance");
  return in;
}

Tensor run(FluxTransformer& model, const Inputs& in) {
  return model.forward(in.latents, in.timesteps, in.context, in.pooled, in.guidance);
}

TEST(FluxConfig, FromShapesOfDevAndSchnell) {
  for (const char* variant : {"dev", "schnell"}) {
    SCOPED_TRACE(variant);
    SafetensorsFile file = open_fixture(std::string(variant) + "_bfl.safetensors");
    std::map<std::string, Shape> shapes = tensor_shapes(file);
    FluxConfig c = config_from_shapes(shapes, kTinyAxes);
    EXPECT_EQ(c.in_channels, 16);
    EXPECT_EQ(c.hidden_size, 32);
    EXPECT_EQ(c.num_heads, 2);
    EXPECT_EQ(c.head_dim(), 16);
    EXPECT_EQ(c.depth, 2);
    EXPECT_EQ(c.depth_single, 2);
    EXPECT_EQ(c.context_dim, 32);
    EXPECT_EQ(c.vec_dim, 24);
    EXPECT_EQ(c.mlp_hidden(), 128);
    EXPECT_TRUE(c.qkv_bias);
    EXPECT_EQ(c.guidance_embed, std::string(variant) == "dev");
    EXPECT_EQ(c.axes_dim, kTinyAxes);
  }
}

TEST(FluxConfig, RealSizeNamesAndCount) {
  FluxConfig dev;  // the defaults: Flux.1-dev
  std::map<std::string, Shape> shapes = parameter_shapes(dev);
  EXPECT_EQ(shapes.at("img_in.weight"), (Shape{3072, 64}));
  EXPECT_EQ(shapes.at("txt_in.weight"), (Shape{3072, 4096}));
  EXPECT_EQ(shapes.at("double_blocks.18.img_mod.lin.weight"), (Shape{18432, 3072}));
  EXPECT_EQ(shapes.at("double_blocks.0.txt_attn.qkv.bias"), (Shape{9216}));
  EXPECT_EQ(shapes.at("double_blocks.0.img_attn.norm.key_norm.scale"), (Shape{128}));
  EXPECT_EQ(shapes.at("double_blocks.0.img_mlp.2.weight"), (Shape{3072, 12288}));
  EXPECT_EQ(shapes.at("single_blocks.37.linear1.weight"), (Shape{21504, 3072}));
  EXPECT_EQ(shapes.at("single_blocks.37.linear2.weight"), (Shape{3072, 15360}));
  EXPECT_EQ(shapes.at("single_blocks.0.modulation.lin.weight"), (Shape{9216, 3072}));
  EXPECT_EQ(shapes.at("final_layer.adaLN_modulation.1.weight"), (Shape{6144, 3072}));
  EXPECT_EQ(shapes.at("final_layer.linear.weight"), (Shape{64, 3072}));
  int64_t n = 0;
  for (auto& [name, shape] : shapes) n += numel(shape);
  EXPECT_EQ(n, 11901408320);  // Flux.1-dev's published count; 339,831,296 per double, 141,591,808 per single block
  FluxConfig schnell{.guidance_embed = false};
  int64_t n_schnell = 0;
  for (auto& [name, shape] : parameter_shapes(schnell)) n_schnell += numel(shape);
  EXPECT_EQ(n - n_schnell, (256 * 3072 + 3072) + (3072 * 3072 + 3072));  // guidance_in only
  EXPECT_EQ(config_from_shapes(shapes).depth, 19);
  EXPECT_EQ(config_from_shapes(shapes).num_heads, 24);
}

TEST(FluxConfig, BrokenShapeMapsAreDataErrors) {
  const std::map<std::string, Shape> good = tensor_shapes(open_fixture("dev_bfl.safetensors"));
  auto message = [](const std::map<std::string, Shape>& shapes, std::vector<int64_t> axes = kTinyAxes) {
    return shape_map_error([&](const auto& s) { config_from_shapes(s, axes); }, shapes);
  };
  auto without = [&](const std::string& name) { return wick::testing::without(good, name); };
  auto with = [&](const std::string& name, Shape shape) { return wick::testing::with(good, name, std::move(shape)); };
  EXPECT_THAT(message(without("img_in.weight")), HasSubstr("'img_in.weight' is missing"));
  EXPECT_THAT(message(without("double_blocks.1.txt_mlp.2.bias")),
              HasSubstr("'double_blocks.1.txt_mlp.2.bias' is missing"));
  EXPECT_THAT(message(with("single_blocks.1.linear2.weight", {32, 150})),
              HasSubstr("'single_blocks.1.linear2.weight' has shape [32, 150]"));
  EXPECT_THAT(message(with("txt_in.weight", {48, 32})), HasSubstr("'txt_in.weight' has shape [48, 32]"));
  EXPECT_THAT(message(good, {16, 56, 56}), HasSubstr("axes_dim [16, 56, 56] sums to 128 but the head width is 16"));
  EXPECT_THAT(message(with("double_blocks.0.img_attn.norm.query_norm.scale", {12})),
              HasSubstr("not a multiple of the head width 12"));
  EXPECT_THAT(message(with("double_blocks.3.img_mod.lin.weight", {192, 32})), HasSubstr("a block is missing"));
  EXPECT_THAT(message(with("double_blocks.0.img_attn.extra", {1})), HasSubstr("'double_blocks.0.img_attn.extra'"));
  std::map<std::string, Shape> prefixed;
  for (auto& [name, shape] : good) prefixed["model.diffusion_model." + name] = shape;
  EXPECT_THAT(message(prefixed), HasSubstr("strip that prefix"));
  EXPECT_THAT(message({}), HasSubstr("'img_in.weight' is missing"));
}

TEST(FluxPacking, MatchesDiffusersAndRoundTrips) {
  SafetensorsFile file = open_fixture("dev_case.safetensors");
  Tensor latents = file.get("latents");  // [2, 4, 6, 10]
  Tensor packed = pack_latents(latents);
  EXPECT_EQ(packed.shape(), (Shape{2, 15, 16}));
  EXPECT_EQ(packed.to_vector<float>(), file.get("packed").to_vector<float>());  // exact: a permutation
  EXPECT_EQ(unpack_latents(packed, 6, 10).to_vector<float>(), latents.to_vector<float>());
  EXPECT_EQ(image_ids(3, 5).to_vector<float>(), file.get("img_ids").to_vector<float>());
  EXPECT_EQ(image_ids(2, 3).to_vector<float>(),
            (std::vector<float>{0, 0, 0, 0, 0, 1, 0, 0, 2, 0, 1, 0, 0, 1, 1, 0, 1, 2}));
  for (float v : file.get("txt_ids").to_vector<float>()) EXPECT_EQ(v, 0.0f);
  EXPECT_THAT(error_of([&] { pack_latents(latents.narrow(2, 0, 5)); }), HasSubstr("H and W even"));
  EXPECT_THAT(error_of([&] { unpack_latents(packed, 6, 8); }), HasSubstr("is not [B, (6/2)(8/2), 4C]"));
}

TEST(FluxLora, BlockGlobsWrapExactlyTheFixtureModules) {
  LoadedModel loaded = parity_arch("flux").load("dev_bfl.safetensors");
  nn::AdapterReport report =
      nn::apply_adapters(*loaded.model, {.patterns = {"double_blocks.*", "single_blocks.*"}, .options = {.rank = 4}});
  std::vector<std::string> wrapped = report.wrapped;
  std::sort(wrapped.begin(), wrapped.end());
  EXPECT_EQ(wrapped, lora_paths(open_fixture("dev_lora_case.safetensors"), "bfl."));
  EXPECT_EQ(report.n_trainable, loaded.model->n_parameters(/*trainable_only=*/true));
}

TEST(FluxLora, CpuStepTime) {
  const ParityArch& flux = parity_arch("flux");
  double best = 1e30, best_checkpointed = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    best = std::min(best, run_lora(flux, flux.lora_kinds.at(0), false).forward_backward_ms);
    best_checkpointed = std::min(best_checkpointed, run_lora(flux, flux.lora_kinds.at(0), true).forward_backward_ms);
  }
  std::printf("[dev LoRA] tiny model, batch 2, 15 image + 7 text tokens: forward + backward %.2f ms, with gradient "
              "checkpointing %.2f ms (best of 5)\n",
              best, best_checkpointed);
}

TEST(FluxForward, BadInputsAreClearErrors) {
  LoadedModel dev = parity_arch("flux").load("dev_bfl.safetensors"),
              schnell = parity_arch("flux").load("schnell_bfl.safetensors");
  Inputs in = case_inputs(open_fixture("dev_case.safetensors"));
  auto call = [](FluxTransformer& m, const Inputs& i) { return error_of([&] { run(m, i); }); };
  Inputs no_guidance = in;
  no_guidance.guidance = Tensor();
  EXPECT_THAT(call(as_flux(dev), no_guidance), HasSubstr("pass guidance [2]"));
  EXPECT_THAT(call(as_flux(schnell), in), HasSubstr("has no guidance_in"));
  Inputs odd = in;
  odd.latents = in.latents.narrow(2, 0, 5).contiguous();
  EXPECT_THAT(call(as_flux(dev), odd), HasSubstr("must be even"));
  Inputs channels = in;
  channels.latents = in.latents.narrow(1, 0, 3).contiguous();
  EXPECT_THAT(call(as_flux(dev), channels), HasSubstr("this model takes 4"));
  Inputs context = in;
  context.context = in.context.narrow(2, 0, 31).contiguous();
  EXPECT_THAT(call(as_flux(dev), context), HasSubstr("is not [2, L, 32]"));
  Inputs pooled = in;
  pooled.pooled = in.pooled.narrow(1, 0, 23).contiguous();
  EXPECT_THAT(call(as_flux(dev), pooled), HasSubstr("is not [2, 24]"));
  Inputs timesteps = in;
  timesteps.timesteps = in.timesteps.narrow(0, 0, 1).contiguous();
  EXPECT_THAT(call(as_flux(dev), timesteps), HasSubstr("timesteps"));
  // Any even size works (no fixed grid): another shape runs and keeps it.
  Inputs other = in;
  other.latents = in.latents.narrow(2, 0, 4).narrow(3, 0, 2).contiguous();
  EXPECT_EQ(run(as_flux(dev), other).shape(), (Shape{2, 4, 4, 2}));
  EXPECT_THAT(error_of([] { FluxTransformer bad(FluxConfig{.hidden_size = 32, .num_heads = 2}); }),
              HasSubstr("axes_dim [16, 56, 56] sums to 128 but the head width is 16"));
}

}  // namespace
}  // namespace wick::flux
