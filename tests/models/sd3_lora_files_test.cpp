// SD3 LoRA files written elsewhere load into a model built through the registry, and the files wick writes are
// the ones other tools write: against the fixtures of tests/data/sd3 (diffusers 0.42.1, PEFT 0.21.2; see its
// README). The model is built the way `wick train` builds it: find_architecture("sd3").build on
// medium_sai.safetensors (or the medium_diffusers folder), f32, then adapters of rank 4, alpha 8 on the "all"
// preset (the 31 Linears of the blocks). Also: sd3's LoRA files are PEFT unless save.format says kohya.
//
// Metric, per tensor: max_i |wick_i - ref_i| / max_i |ref_i|.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "engine/autograd/backward.h"
#include "engine/autograd/node.h"
#include "engine/autograd/ops_loss.h"
#include "models/lora_files.h"
#include "models/nn/adapters.h"
#include "models/registry.h"
#include "models/sd3/sd3.h"
#include "models/weights/lora_format.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/matmul.h"
#include "runtime/safetensors.h"
#include "tests/error_of.h"
#include "tests/models/weights_test_util.h"
#include "tests/test_data.h"

namespace wick {
namespace {

using ::testing::HasSubstr;
using testing::same_bits;

std::string sd3_data(const std::string& name) { return testing::test_data_dir() + "/sd3/" + name; }

double relative_to_max(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  double worst = 0, scale = 0;
  for (size_t i = 0; i < w.size() && i < g.size(); ++i) {
    worst = std::max(worst, std::fabs(g[i] - w[i]));
    scale = std::max(scale, std::fabs(w[i]));
  }
  return scale > 0 ? worst / scale : worst;
}

// The medium fixture built through the registry, with adapters of `type` (lora | dora, the DoRA in `axis`) of
// rank 4, alpha 8 on the "all" preset; no adapters when type is empty.
std::shared_ptr<DiffusionModel> build_medium(const std::string& type = "lora", nn::DoraAxis axis = nn::DoraAxis::Output,
                                             const std::string& weights = sd3_data("medium_sai.safetensors")) {
  const Architecture& arch = find_architecture("sd3");
  const ModelConfig config{.arch = arch.name(), .name_or_path = weights, .dtype = DType::F32,
                           .options = ModelOptions::defaults(arch.schema().keys)};
  std::shared_ptr<DiffusionModel> model = arch.build(
      {.model = config,
       .data = {.model_family = "sd3", .latent_channels = 16, .latent_sizes = {{8, 8}, {6, 10}}, .text_length = 7,
                .text_dim = 32, .pooled_dim = 64},
       .dtype = DType::F32});
  if (!type.empty()) {
    nn::AdapterReport report = nn::apply_adapters(
        *model, {.type = type, .patterns = arch.targets({}), .options = {.rank = 4, .alpha = 8.0, .dora_axis = axis}});
    EXPECT_EQ(report.wrapped.size(), 31u);
  }
  return model;
}

// The model's output on a case file's square latents.
Tensor run_case(DiffusionModel& model, const SafetensorsFile& inputs) {
  diffusion::Conditioning cond{.context = inputs.get("context"), .pooled = inputs.get("pooled")};
  return model.predict(inputs.get("latents_square"), inputs.get("sigma"), cond);
}

TrainConfig save_config(LoraFormat format) {
  TrainConfig config;
  config.name = "sd3_lora_files_test";
  config.save.dtype = DType::F32;
  config.save.format = format;
  return config;
}

std::set<std::string> key_set(const std::map<std::string, Tensor>& tensors) {
  std::set<std::string> keys;
  for (const auto& [name, tensor] : tensors) keys.insert(name);
  return keys;
}

void copy_into(Tensor& slot, const Tensor& value) { autograd::detach(slot).copy_from(value.reshape(slot.shape())); }

TEST(Sd3LoraFiles, KohyaAndDiffusersPeftFilesLoadIntoTheRegistryModel) {
  SafetensorsFile lora_case = SafetensorsFile::open(sd3_data("medium_lora_case.safetensors"));
  const Tensor want = lora_case.get("output");
  auto from_kohya = build_medium();
  load_lora(*from_kohya, sd3_data("medium_lora_kohya.safetensors"));
  const Tensor kohya_out = run_case(*from_kohya, lora_case);
  auto from_peft = build_medium();
  load_lora(*from_peft, sd3_data("medium_lora_peft.safetensors"));  // diffusers' file: alpha 8 / r 4 in its metadata
  const Tensor peft_out = run_case(*from_peft, lora_case);
  auto base = build_medium("");
  const double base_change = relative_to_max(run_case(*base, lora_case), want);
  const double kohya_error = relative_to_max(kohya_out, want), peft_error = relative_to_max(peft_out, want);
  std::printf("[sd3 LoRA files] registry model + medium_lora_kohya: %.3g, + medium_lora_peft: %.3g vs PEFT's output "
              "(the base alone is %.3g from it)\n",
              kohya_error, peft_error, base_change);
  EXPECT_LE(kohya_error, 1e-5);
  EXPECT_LE(peft_error, 1e-5);
  EXPECT_GT(base_change, 1e-2) << "the LoRA must change the output for the comparison to mean anything";
}

TEST(Sd3LoraFiles, SavedFilesHaveTheKeysDiffusersAndKohyaWrite) {
  auto model = build_medium();
  load_lora(*model, sd3_data("medium_lora_kohya.safetensors"));
  const std::filesystem::path dir = testing::scratch_dir("sd3_lora_files");

  // PEFT: exactly diffusers' keys; each part's B·A is the file's scaled by its lora_alpha / r = 2.
  const std::string peft_path = (dir / "peft.safetensors").string();
  save_lora(*model, save_config(LoraFormat::Peft), peft_path, 7, "");
  LoraFile ours = read_lora_file(peft_path), theirs = read_lora_file(sd3_data("medium_lora_peft.safetensors"));
  EXPECT_EQ(ours.format, LoraFileFormat::Peft);
  const std::set<std::string> our_keys = key_set(ours.tensors), their_keys = key_set(theirs.tensors);
  std::vector<std::string> missing, unexpected;
  std::set_difference(their_keys.begin(), their_keys.end(), our_keys.begin(), our_keys.end(),
                      std::back_inserter(missing));
  std::set_difference(our_keys.begin(), our_keys.end(), their_keys.begin(), their_keys.end(),
                      std::back_inserter(unexpected));
  EXPECT_EQ(our_keys.size(), 94u);
  EXPECT_THAT(missing, ::testing::IsEmpty());
  EXPECT_THAT(unexpected, ::testing::IsEmpty());
  int n_parts = 0;
  for (const auto& [name, a] : theirs.tensors) {
    if (name.find(".lora_A.") == std::string::npos) continue;
    SCOPED_TRACE(name);
    const std::string b = name.substr(0, name.size() - std::string("lora_A.weight").size()) + "lora_B.weight";
    EXPECT_TRUE(
        same_bits(matmul(ours.tensors.at(b), ours.tensors.at(name)), mul(matmul(theirs.tensors.at(b), a), 2.0)));
    ++n_parts;
  }
  EXPECT_EQ(n_parts, 47);
  const nlohmann::json adapter = nlohmann::json::parse(ours.metadata.at("lora_adapter_metadata"));
  EXPECT_EQ(adapter.at("transformer.r"), 4);
  EXPECT_EQ(adapter.at("transformer.lora_alpha"), 4.0);  // the scale is baked into lora_B
  EXPECT_EQ(ours.metadata.at("modelspec.architecture"), "stable-diffusion-3-5-medium/lora");
  EXPECT_EQ(ours.metadata.at("ss_base_model_version"), "sd3");

  // kohya: exactly the keys of the kohya fixture (lora_unet_joint_blocks_...), the same tensors.
  const std::string kohya_path = (dir / "kohya.safetensors").string();
  save_lora(*model, save_config(LoraFormat::Kohya), kohya_path, 7, "");
  LoraFile kohya = read_lora_file(kohya_path);
  LoraFile kohya_fixture = read_lora_file(sd3_data("medium_lora_kohya.safetensors"));
  EXPECT_EQ(key_set(kohya.tensors), key_set(kohya_fixture.tensors));
  for (const auto& [name, tensor] : kohya_fixture.tensors)
    EXPECT_TRUE(same_bits(kohya.tensors.at(name), tensor)) << name;
  EXPECT_EQ(kohya.tensors.count("lora_unet_joint_blocks_1_x_block_attn2_qkv.lora_down.weight"), 1u);

  // Both load back to the same output.
  SafetensorsFile lora_case = SafetensorsFile::open(sd3_data("medium_lora_case.safetensors"));
  const Tensor loaded = run_case(*model, lora_case);
  for (const std::string& path : {peft_path, kohya_path}) {
    auto again = build_medium();
    load_lora(*again, path);
    EXPECT_LE(relative_to_max(run_case(*again, lora_case), loaded), 1e-6) << path;
  }
}

// PEFT's DoRA (output axis, magnitude [out]) on the fused SAI layers equals PEFT's per-module DoRAs of diffusers'
// Linears: forward, loss gradients of lora_down, lora_up and the magnitude; and a PEFT file saved from it carries
// PEFT's tensors (the last block's context modulation swapped back into diffusers' order) and loads back. The
// kohya orientation (dora_scale [1, in]) round-trips through a kohya file.
TEST(Sd3LoraFiles, DoraInBothConventions) {
  SafetensorsFile dora_case = SafetensorsFile::open(sd3_data("medium_dora_case.safetensors"));
  auto model = build_medium("dora", nn::DoraAxis::Output);
  auto adapters = nn::find_adapters(*model);
  ASSERT_EQ(adapters.size(), 31u);
  for (auto& [path, adapter] : adapters) {
    auto dora = std::dynamic_pointer_cast<nn::DoRALinear>(adapter);
    ASSERT_NE(dora, nullptr) << path;
    copy_into(adapter->down_weight(), dora_case.get("sai." + path + ".lora_down"));
    copy_into(adapter->up_weight(), dora_case.get("sai." + path + ".lora_up"));
    copy_into(dora->magnitude(), dora_case.get("sai." + path + ".magnitude"));
  }
  const Tensor output = run_case(*model, dora_case);
  const double output_error = relative_to_max(output, dora_case.get("output"));
  EXPECT_LE(output_error, 1e-5);

  // Saved as PEFT: diffusers' module names, PEFT's magnitudes as they are, lora_B with alpha / r = 2.
  const std::string path = (testing::scratch_dir("sd3_dora_files") / "dora_peft.safetensors").string();
  save_lora(*model, save_config(LoraFormat::Peft), path, 1, "");
  LoraFile saved = read_lora_file(path);
  std::set<std::string> expected;
  for (const std::string& name : dora_case.names()) {
    if (name.rfind("peft.", 0) != 0) continue;
    const size_t dot = name.rfind('.');
    const std::string module = name.substr(5, dot - 5), kind = name.substr(dot + 1);
    const std::string key = "transformer." + module + "." + kind + (kind == "lora_magnitude_vector" ? "" : ".weight");
    expected.insert(key);
    SCOPED_TRACE(key);
    ASSERT_EQ(saved.tensors.count(key), 1u);
    const Tensor theirs = dora_case.get(name);
    if (kind == "lora_B")
      EXPECT_TRUE(same_bits(saved.tensors.at(key), mul(theirs, 2.0)));
    else
      EXPECT_TRUE(same_bits(saved.tensors.at(key), theirs));
  }
  EXPECT_EQ(expected.size(), 141u);  // 47 diffusers Linears x (lora_A, lora_B, lora_magnitude_vector)
  EXPECT_EQ(key_set(saved.tensors), expected);
  EXPECT_EQ(nlohmann::json::parse(saved.metadata.at("lora_adapter_metadata")).at("transformer.use_dora"), true);
  auto again = build_medium("dora", nn::DoraAxis::Output);
  load_lora(*again, path);
  EXPECT_LE(relative_to_max(run_case(*again, dora_case), output), 1e-6);
  auto input_axis = build_medium("dora", nn::DoraAxis::Input);
  EXPECT_THAT(testing::error_of([&] { load_lora(*input_axis, path); }),
              HasSubstr("PEFT files carry the output-axis [out]"));

  // The kohya orientation: dora_scale [1, in] per module, ComfyUI's; saved and loaded back.
  auto kohya_dora = build_medium("dora", nn::DoraAxis::Input);
  for (auto& [module, adapter] : nn::find_adapters(*kohya_dora)) {
    copy_into(adapter->down_weight(), dora_case.get("sai." + module + ".lora_down"));
    copy_into(adapter->up_weight(), dora_case.get("sai." + module + ".lora_up"));
  }
  const std::string kohya_path = (testing::scratch_dir("sd3_dora_kohya") / "dora_kohya.safetensors").string();
  save_lora(*kohya_dora, save_config(LoraFormat::Kohya), kohya_path, 1, "");
  LoraFile kohya = read_lora_file(kohya_path);
  EXPECT_EQ(kohya.tensors.at("lora_unet_joint_blocks_0_x_block_attn2_qkv.dora_scale").shape(), (Shape{1, 32}));
  auto kohya_again = build_medium("dora", nn::DoraAxis::Input);
  load_lora(*kohya_again, kohya_path);
  EXPECT_LE(relative_to_max(run_case(*kohya_again, dora_case), run_case(*kohya_dora, dora_case)), 1e-6);
}

TEST(Sd3LoraFiles, DiffusersFolderBuildsTheSameModelAsTheSaiFile) {
  SafetensorsFile medium_case = SafetensorsFile::open(sd3_data("medium_case.safetensors"));
  auto sai = build_medium("");
  auto diffusers = build_medium("", nn::DoraAxis::Output, sd3_data("medium_diffusers"));
  const Tensor sai_out = run_case(*sai, medium_case), diffusers_out = run_case(*diffusers, medium_case);
  EXPECT_TRUE(same_bits(sai_out, diffusers_out));
  const double error = relative_to_max(sai_out, medium_case.get("output_square"));
  std::printf("[sd3 registry] medium_sai and medium_diffusers: bitwise %s; vs diffusers' output %.3g\n",
              same_bits(sai_out, diffusers_out) ? "equal" : "DIFFERENT", error);
  EXPECT_LE(error, 1e-5);
  // The sd3.0-like file has no ln_q: its head width comes from model.head_dim (SAI's 64 otherwise).
  const Architecture& arch = find_architecture("sd3");
  ModelConfig no_norm{.arch = "sd3", .name_or_path = sd3_data("sd3_sai.safetensors"), .dtype = DType::F32,
                      .options = ModelOptions::defaults(arch.schema().keys)};
  EXPECT_THAT(testing::error_of([&] { arch.build({.model = no_norm, .dtype = DType::F32}); }),
              HasSubstr("not a multiple of the head width 64"));
  no_norm.options.set("head_dim", int64_t{8});
  auto sd3 = arch.build({.model = no_norm, .dtype = DType::F32});
  SafetensorsFile sd3_case = SafetensorsFile::open(sd3_data("sd3_case.safetensors"));
  EXPECT_LE(relative_to_max(run_case(*sd3, sd3_case), sd3_case.get("output_square")), 1e-5);
  // The dataset must be SD3's: family, channels and the two text widths are checked before loading.
  const ModelConfig medium{.arch = "sd3", .name_or_path = sd3_data("medium_sai.safetensors"), .dtype = DType::F32,
                           .options = ModelOptions::defaults(arch.schema().keys)};
  auto build_with = [&](DataGeometry data) {
    return testing::error_of([&] { arch.build({.model = medium, .data = data, .dtype = DType::F32}); });
  };
  EXPECT_THAT(build_with({.model_family = "flux"}), HasSubstr("model_family 'flux'"));
  EXPECT_THAT(build_with({.latent_channels = 4}), HasSubstr("4-channel latents"));
  EXPECT_THAT(build_with({.text_dim = 4096}), HasSubstr("text embeddings are 4096 wide"));
  EXPECT_THAT(build_with({.pooled_dim = 2048}), HasSubstr("pooled embeddings are 2048 wide"));
}

// save.format defaults to the architecture's: PEFT for sd3 (diffusers and ComfyUI load it), kohya for Flux and the
// DiT; a config that names a format keeps it. ai-toolkit's is_v3 selects sd3.
TEST(Sd3LoraFiles, SaveFormatDefaultsToPeftForSd3) {
  const std::string weights = sd3_data("medium_sai.safetensors");
  auto parse = [&](const std::string& yaml) { return parse_config_string(yaml, "<test>", config_schema()); };
  const std::string common = "name: t\ndataset: {path: d.h5}\nnetwork: {type: lora}\n";
  TrainConfig sd3 = parse(common + "model: {arch: sd3.5, name_or_path: " + weights + "}\n");
  EXPECT_EQ(sd3.model.arch, "sd3");
  EXPECT_EQ(sd3.save.format, LoraFormat::Peft);
  TrainConfig kohya = parse(common + "model: {arch: sd3, name_or_path: " + weights + "}\nsave: {format: kohya}\n");
  EXPECT_EQ(kohya.save.format, LoraFormat::Kohya);
  TrainConfig flux = parse(common + "model: {arch: flux, name_or_path: x.safetensors}\n");
  EXPECT_EQ(flux.save.format, LoraFormat::Kohya);
  TrainConfig ai_toolkit = parse("job: extension\nconfig:\n  name: t\n  process:\n    - type: sd_trainer\n"
                                 "      network: {type: lora}\n      datasets: [{folder_path: d.h5}]\n"
                                 "      model: {name_or_path: " + weights + ", is_v3: true}\n");
  EXPECT_EQ(ai_toolkit.model.arch, "sd3");
  EXPECT_EQ(ai_toolkit.save.format, LoraFormat::Peft);
  EXPECT_EQ(parse(to_yaml(sd3)), sd3);  // the resolved config keeps the format
  // A full fine-tune writes the model, not a LoRA file: no LoRA format is imposed on it.
  TrainConfig full = parse("name: t\ndataset: {path: d.h5}\nnetwork: {type: full}\nmodel: {arch: sd3, name_or_path: " +
                           weights + "}\n");
  EXPECT_EQ(full.save.format, LoraFormat::Kohya);
}

}  // namespace
}  // namespace wick
