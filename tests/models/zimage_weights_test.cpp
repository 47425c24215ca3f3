// Z-Image weights (models/zimage/zimage_weights.h) from the three layouts of tests/data/zimage (tests/reference/
// make_zimage_fixtures.py): the diffusers/authors' sharded transformer/ folder (bf16, config.json beside it), the
// ComfyUI single file (bf16, names under model.diffusion_model., fused attention.qkv) and the ComfyUI scaled-fp8 file
// (F8_E4M3 block Linears with per-tensor scale_weight, no prefix). Each loads strictly (the bf16 layouts' output is
// their row of arch_parity_test.cpp); the fp8 file gives diffusers' output with its dequantized weights, and so does
// it rewritten with per-row scales and in diffusers' names (split F8 q/k/v, written here).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

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

// Their output against diffusers is ArchParity.ForwardMatchesDiffusersInF32/zimage (arch_parity_test.cpp).
TEST(ZImageWeights, EachLayoutIsDetectedAndLoadsEveryTensorFrozen) {
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
  EXPECT_TRUE(
      in_mapping(model.parameter("layers.1.attention.to_k.weight"), source.file_of("layers.1.attention.qkv.weight")));
  EXPECT_EQ(model.parameter("layers.1.attention.to_k.weight_scale").to_vector<float>(),
            source.get("layers.1.attention.qkv.scale_weight").to_vector<float>());
  const double error = error_against(model, "fp8_case.safetensors");
  std::printf("Z-Image from the ComfyUI scaled-fp8 file: output vs diffusers with the dequantized weights %.3g\n",
              error);
  EXPECT_LE(error, 1e-5);
}

// A tensor to write with its safetensors dtype string (F8_E4M3 included, which wick's writer does not take).
struct RawTensor {
  std::string name, dtype;
  Shape shape;
  std::vector<uint8_t> bytes;
};

RawTensor raw(const std::string& name, const std::string& dtype, const Shape& shape, const Tensor& t) {
  Tensor c = t.contiguous();
  const auto* data = static_cast<const uint8_t*>(c.data());
  return {name, dtype, shape, std::vector<uint8_t>(data, data + c.nbytes())};
}

RawTensor raw_f32(const std::string& name, const std::vector<float>& values) {
  return raw(name, "F32", {static_cast<int64_t>(values.size())},
             Tensor::from_vector<float>(values, {static_cast<int64_t>(values.size())}));
}

void write_raw(const fs::path& path, const std::vector<RawTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  size_t offset = 0;
  for (const RawTensor& t : tensors) {
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t n = text.size();
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const RawTensor& t : tensors)
    out.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
}

// The scaled-fp8 fixture rewritten: every tensor as stored, except that the fused qkv of each block is either
// kept with a per-row scale [3·64] (ComfyUI names), or split into F8 to_q, to_k, to_v with per-row weight_scale
// [64] under diffusers' names (the other ComfyUI renames applied too). The values equal the fixture's, so the
// output must be fp8_case's. With part_scaled, the per-row scales of q, k and v rows are 1, 2 and 3 times the
// tensor's (ComfyUI names; for checking which rows each part takes).
fs::path rewritten_float8(bool diffusers_names, bool part_scaled = false) {
  WeightSource source = WeightSource::open(data_path("zimage/comfyui_fp8_scaled.safetensors"));
  std::vector<RawTensor> out;
  auto rename = [&](std::string name) {
    if (!diffusers_names) return name;
    for (const auto& [from, to] :
         std::vector<std::pair<std::string, std::string>>{{"attention.out.", "attention.to_out.0."},
                                                          {"attention.q_norm.", "attention.norm_q."},
                                                          {"attention.k_norm.", "attention.norm_k."},
                                                          {"x_embedder.", "all_x_embedder.2-1."},
                                                          {"final_layer.", "all_final_layer.2-1."}})
      if (const size_t at = name.find(from); at != std::string::npos) name.replace(at, from.size(), to);
    return name.find(".scale_weight") != std::string::npos ? name.substr(0, name.size() - 13) + ".weight_scale" : name;
  };
  for (const std::string& name : source.names()) {
    const SafetensorsInfo& info = source.info(name);
    if (diffusers_names && name == "norm_final.weight") continue;
    if (name.find(".attention.qkv.") == std::string::npos) {
      out.push_back(raw(rename(name), info.dtype, info.shape, source.get(name)));
      continue;
    }
    if (name.find("scale_weight") != std::string::npos) {
      const float scale = source.get(name).to_vector<float>().at(0);
      std::vector<float> rows(192, scale);
      for (size_t row = 0; part_scaled && row < rows.size(); ++row)
        rows[row] = scale * static_cast<float>(1 + row / 64);
      if (!diffusers_names) out.push_back(raw_f32(name, rows));
      if (diffusers_names) {
        const std::string block = name.substr(0, name.find(".attention.qkv."));
        for (const char* part : {"to_q", "to_k", "to_v"})
          out.push_back(raw_f32(block + ".attention." + part + ".weight_scale", std::vector<float>(64, scale)));
      }
      continue;
    }
    Tensor codes = source.get(name).reshape(info.shape);  // U8 [192, 64]
    if (!diffusers_names) {
      out.push_back(raw(name, "F8_E4M3", info.shape, codes));
      continue;
    }
    const std::string block = name.substr(0, name.find(".attention.qkv."));
    const char* parts[] = {"to_q", "to_k", "to_v"};
    for (int64_t part = 0; part < 3; ++part)
      out.push_back(
          raw(block + ".attention." + parts[part] + ".weight", "F8_E4M3", {64, 64}, codes.narrow(0, 64 * part, 64)));
  }
  fs::path path = scratch_dir(diffusers_names ? "zimage_f8_diffusers"
                              : part_scaled   ? "zimage_f8_part_scaled"
                                              : "zimage_f8_per_row") /
                  "model.safetensors";
  write_raw(path, out);
  return path;
}

TEST(ZImageWeights, Float8PerRowScalesAndDiffusersNames) {
  for (bool diffusers_names : {false, true}) {
    SCOPED_TRACE(diffusers_names ? "diffusers names, split F8 q/k/v" : "ComfyUI names, per-row qkv scales");
    WeightSource source = WeightSource::open(rewritten_float8(diffusers_names).string());
    LoadedZImage loaded = load_transformer(source, {.dtype = DType::F32, .rope = kTinyRope});
    EXPECT_EQ(loaded.format.format.name, diffusers_names ? "diffusers" : "comfyui");
    EXPECT_EQ(loaded.float8_layers.size(), 31u);
    EXPECT_EQ(loaded.model->parameter("context_refiner.0.attention.to_v.weight_scale").shape(), (Shape{64}));
    EXPECT_LE(error_against(*loaded.model, "fp8_case.safetensors"), 1e-5);
  }
  // Each of q, k, v takes its own rows of a per-row scale.
  WeightSource source = WeightSource::open(rewritten_float8(false, true).string());
  LoadedZImage loaded = load_transformer(source, {.dtype = DType::F32, .rope = kTinyRope});
  const float scale = source.get("layers.1.attention.qkv.scale_weight").to_vector<float>().at(0);
  const char* parts[] = {"to_q", "to_k", "to_v"};
  for (int part = 0; part < 3; ++part)
    EXPECT_EQ(
        loaded.model->parameter(std::string("layers.1.attention.") + parts[part] + ".weight_scale").to_vector<float>(),
        std::vector<float>(64, scale * static_cast<float>(part + 1)))
        << parts[part];
}

// A full fine-tune of a diffusers-folder base (the sharded transformer/ with its config.json) is written back as a
// diffusers folder: one file of the model's names beside the base's config.json, which loads as a base again with
// every tensor as written. (The ComfyUI layout: Z-Image's row of arch_export_test.cpp.)
TEST(ZImageWeights, DiffusersBaseExportsADiffusersFolder) {
  const fs::path dir = scratch_dir("zimage_export_diffusers");
  LoadedZImage base = load_transformer(WeightSource::open(data_path("zimage/diffusers/transformer")),
                                       {.dtype = DType::F32});
  EXPECT_EQ(base.model->weight_origin().layout, "diffusers");
  const fs::path written = export_transformer(*base.model, dir, "run", DType::F32, {{"wick_step", "7"}});
  EXPECT_EQ(written, dir / "run");
  std::ifstream a(written / "config.json"), b(data_path("zimage/diffusers/transformer/config.json"));
  const std::string written_config((std::istreambuf_iterator<char>(a)), std::istreambuf_iterator<char>());
  const std::string base_config((std::istreambuf_iterator<char>(b)), std::istreambuf_iterator<char>());
  EXPECT_EQ(written_config, base_config);
  const SafetensorsFile file = SafetensorsFile::open((written / "diffusion_pytorch_model.safetensors").string());
  EXPECT_EQ(file.metadata().at("wick_step"), "7");
  LoadedZImage again = load_transformer(WeightSource::open(written.string()), {.dtype = DType::F32});
  EXPECT_EQ(again.format.format.name, "diffusers");
  EXPECT_EQ(again.model->named_parameters().size(), base.model->named_parameters().size());
  for (const auto& [name, tensor] : base.model->named_parameters())
    EXPECT_EQ(again.model->parameter(name).to_vector<float>(), tensor.to_vector<float>()) << name;
  // A float8 model is no full fine-tune: refused.
  LoadedZImage f8 = load_transformer(WeightSource::open(data_path("zimage/comfyui_fp8_scaled.safetensors")),
                                     {.dtype = DType::F32, .rope = kTinyRope});
  EXPECT_THAT(error_of([&] { export_transformer(*f8.model, dir, "f8", DType::F32, {}); }),
              HasSubstr("a full fine-tune exports a model without float8"));
}

TEST(ZImageWeights, RopeLayoutFromConfigJson) {
  // Beside the weights (the index WeightSource names, or the folder), else the released model's.
  const ZImageRope tiny = rope_from_config_json(data_path("zimage/diffusers"));
  EXPECT_EQ(tiny.axes_dims, kTinyRope.axes_dims);
  EXPECT_EQ(tiny.axes_lens, kTinyRope.axes_lens);
  const ZImageRope released = rope_from_config_json(data_path("zimage/comfyui_bf16.safetensors"));
  EXPECT_EQ(released.axes_dims, (std::vector<int64_t>{32, 48, 48}));
  EXPECT_EQ(released.axes_lens, (std::vector<int64_t>{1536, 512, 512}));
  EXPECT_EQ(released.theta, 256.0);
  fs::path dir = scratch_dir("zimage_config_json");
  std::ofstream(dir / "config.json") << R"({"axes_dims": [8, 12, 12], "axes_lens": "long"})";
  EXPECT_THAT(error_of([&] { rope_from_config_json(dir.string()); }), HasSubstr("malformed"));
  std::ofstream(dir / "config.json") << R"({"_class_name": "AutoencoderKL"})";  // not a Z-Image transformer's
  EXPECT_EQ(rope_from_config_json(dir.string()).axes_dims, released.axes_dims);
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
  tensors.emplace_back("model.diffusion_model.layers.0.attention.extra.weight",
                       comfy.get("model.diffusion_model.x_pad_token"));
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
