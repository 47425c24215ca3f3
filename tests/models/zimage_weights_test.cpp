// Z-Image weights (models/zimage/zimage_weights.h) from the three layouts of tests/data/zimage (tests/reference/
// make_zimage_fixtures.py): the diffusers/authors' sharded transformer/ folder (bf16, config.json beside it), the
// ComfyUI single file (bf16, names under model.diffusion_model., fused attention.qkv) and the ComfyUI scaled-fp8 file
// (F8_E4M3 block Linears with per-tensor scale_weight, no prefix). Each loads strictly and gives diffusers' output.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "engine/autograd/grad_mode.h"
#include "models/nn/linear.h"
#include "models/zimage/zimage_weights.h"
#include "runtime/safetensors.h"
#include "tests/error_of.h"
#include "tests/models/arch_test_util.h"
#include "tests/models/weights_test_util.h"

namespace wick::zimage {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using wick::testing::data_path;
using wick::testing::error_of;
using wick::testing::in_mapping;
using wick::testing::relative_to_max;
using wick::testing::scratch_dir;

const ZImageRope kTinyRope{.axes_dims = {8, 12, 12}, .axes_lens = {256, 64, 64}, .theta = 256.0};

// The worst relative_to_max of the model's output on the case inputs against "output_<i>" of `reference`.
double error_against(ZImageTransformer& model, const std::string& reference) {
  SafetensorsFile inputs = SafetensorsFile::open(data_path("zimage/case.safetensors"));
  SafetensorsFile want = SafetensorsFile::open(data_path("zimage/" + reference));
  std::vector<Tensor> latents, captions;
  for (int i = 0; i < 2; ++i) {
    latents.push_back(inputs.get("latents_" + std::to_string(i)));
    captions.push_back(inputs.get("caption_" + std::to_string(i)));
  }
  autograd::NoGradGuard no_grad;
  std::vector<Tensor> out = model.forward(latents, inputs.get("timestep"), captions);
  return std::max(relative_to_max(out[0], want.get("output_0")), relative_to_max(out[1], want.get("output_1")));
}

TEST(ZImageWeights, EachLayoutGivesDiffusersOutput) {
  struct Layout {
    std::string path, format, prefix;
  };
  const Layout layouts[] = {{"zimage/diffusers", "diffusers", ""},
                            {"zimage/comfyui_bf16.safetensors", "comfyui", "model.diffusion_model."}};
  for (const Layout& l : layouts) {
    SCOPED_TRACE(l.path);
    WeightSource source = WeightSource::open(data_path(l.path), "transformer");
    DetectedFormat format = detect_weight_format(source);
    EXPECT_EQ(format.format.name, l.format);
    EXPECT_EQ(format.prefix, l.prefix);
    // The ComfyUI file has no config.json: the tiny RoPE layout is passed.
    LoadedZImage loaded = load_transformer(source, {.dtype = DType::F32, .rope = kTinyRope});
    EXPECT_EQ(loaded.report.n_loaded, 73);
    EXPECT_TRUE(loaded.float8_layers.empty());
    EXPECT_EQ(loaded.model->n_parameters(/*trainable_only=*/true), 0) << "loaded weights are frozen";
    const double error = error_against(*loaded.model, "case.safetensors");
    std::printf("Z-Image from the %s layout: output vs diffusers %.3g\n", l.format.c_str(), error);
    EXPECT_LE(error, 1e-5);
  }
  // In its own dtype (bf16), the ComfyUI file's renamed and split tensors are views of the mapping.
  WeightSource comfy = WeightSource::open(data_path("zimage/comfyui_bf16.safetensors"));
  LoadedZImage bf16 = load_transformer(comfy, {.dtype = DType::BF16, .rope = kTinyRope});
  EXPECT_EQ(bf16.report.n_zero_copy, 73);
  EXPECT_TRUE(in_mapping(bf16.model->parameter("layers.1.attention.to_v.weight"),
                         comfy.file_of("model.diffusion_model.layers.1.attention.qkv.weight")));
}

TEST(ZImageWeights, ScaledFloat8FileLoadsAsFloat8Linears) {
  WeightSource source = WeightSource::open(data_path("zimage/comfyui_fp8_scaled.safetensors"));
  LoadedZImage loaded = load_transformer(source, {.dtype = DType::F32, .rope = kTinyRope});
  EXPECT_EQ(loaded.format.format.name, "comfyui");
  EXPECT_EQ(loaded.format.prefix, "");
  // 4 blocks x (q, k, v, out, w1, w2, w3) + the 3 modulated blocks' adaLN_modulation.0.
  EXPECT_EQ(loaded.float8_layers.size(), 31u);
  ZImageTransformer& model = *loaded.model;
  auto* to_k = dynamic_cast<nn::Linear*>(model.child("layers")->child("1")->child("attention")->child("to_k").get());
  ASSERT_NE(to_k, nullptr);
  EXPECT_TRUE(to_k->is_float8());
  EXPECT_EQ(model.parameter("layers.1.attention.to_k.weight").dtype(), DType::U8);
  EXPECT_TRUE(in_mapping(model.parameter("layers.1.attention.to_k.weight"),
                         source.file_of("layers.1.attention.qkv.weight")));
  EXPECT_EQ(model.parameter("layers.1.attention.to_k.weight_scale").to_vector<float>(),
            source.get("layers.1.attention.qkv.scale_weight").to_vector<float>());
  const double error = error_against(model, "fp8_case.safetensors");
  std::printf("Z-Image from the ComfyUI scaled-fp8 file: output vs diffusers with the dequantized weights %.3g\n",
              error);
  EXPECT_LE(error, 1e-5);
}

TEST(ZImageWeights, MissingAndForeignTensorsAreNamed) {
  WeightSource comfy = WeightSource::open(data_path("zimage/comfyui_bf16.safetensors"));
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const std::string& name : comfy.names())
    if (name != "model.diffusion_model.layers.1.feed_forward.w3.weight") tensors.emplace_back(name, comfy.get(name));
  fs::path dir = scratch_dir("zimage_broken");
  save_safetensors((dir / "missing.safetensors").string(), tensors);
  EXPECT_THAT(error_of([&] {
                load_transformer(WeightSource::open((dir / "missing.safetensors").string()), {.rope = kTinyRope});
              }),
              HasSubstr("'layers.1.feed_forward.w3.weight' is missing"));
  tensors.emplace_back("model.diffusion_model.layers.1.feed_forward.w3.weight",
                       comfy.get("model.diffusion_model.layers.1.feed_forward.w3.weight"));
  tensors.emplace_back("model.diffusion_model.layers.0.attention.extra.weight", comfy.get("model.diffusion_model.x_pad_token"));
  save_safetensors((dir / "extra.safetensors").string(), tensors);
  EXPECT_THAT(error_of([&] {
                load_transformer(WeightSource::open((dir / "extra.safetensors").string()), {.rope = kTinyRope});
              }),
              HasSubstr("layers.0.attention.extra.weight"));
  // Not Z-Image at all.
  EXPECT_THAT(error_of([] { load_transformer(WeightSource::open(data_path("flux/dev_bfl.safetensors"))); }),
              HasSubstr("layers.0.attention.to_q.weight"));
}

}  // namespace
}  // namespace wick::zimage
