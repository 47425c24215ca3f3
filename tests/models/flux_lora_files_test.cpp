// Flux LoRA files written elsewhere load into a model built through the registry, and the files wick
// writes are the ones other tools write: against the fixtures of tests/data/flux (diffusers 0.42.1,
// PEFT 0.21.2; see its README). The model is built the way `wick train` builds it:
// find_architecture("flux").build on dev_bfl.safetensors (or the dev_diffusers folder), f32, then
// adapters of rank 4, alpha 8 on the "all" preset (the 26 Linears of the blocks).
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
#include "models/flux/flux.h"
#include "models/lora_files.h"
#include "models/nn/adapters.h"
#include "models/registry.h"
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

std::string flux_data(const std::string& name) { return testing::test_data_dir() + "/flux/" + name; }

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

// The `model:` section of a run on `weights`; axes_dim [4, 6, 6] for the BFL file (which does not
// record it), none for the diffusers folder (its config.json has axes_dims_rope).
ModelConfig dev_model_config(const std::string& weights, bool set_axes) {
  const Architecture& arch = find_architecture("flux");
  ModelConfig config{.arch = arch.name(), .name_or_path = weights, .dtype = DType::F32,
                     .options = ModelOptions::defaults(arch.schema().keys)};
  if (set_axes) config.options.set("axes_dim", std::vector<int64_t>{4, 6, 6});
  return config;
}

// The dev fixture built through the registry, with adapters of `type` (lora | dora, the DoRA in
// `axis`) of rank 4, alpha 8 on the "all" preset; no adapters when type is empty.
std::shared_ptr<DiffusionModel> build_dev(const std::string& type = "lora", nn::DoraAxis axis = nn::DoraAxis::Input,
                                          const std::string& weights = flux_data("dev_bfl.safetensors")) {
  const Architecture& arch = find_architecture("flux");
  const ModelConfig config = dev_model_config(weights, weights.find(".safetensors") != std::string::npos);
  std::shared_ptr<DiffusionModel> model =
      arch.build({.model = config,
                  .data = {.latent_channels = 4, .latent_sizes = {{6, 10}}, .text_length = 7, .text_dim = 32,
                           .pooled_dim = 24},
                  .dtype = DType::F32});
  if (!type.empty()) {
    nn::AdapterReport report =
        nn::apply_adapters(*model, {.type = type, .patterns = arch.targets({"all"}),
                                    .options = {.rank = 4, .alpha = 8.0, .dora_axis = axis}});
    EXPECT_EQ(report.wrapped.size(), 26u);
  }
  return model;
}

// The model's output on a case file's inputs (dev: with its guidance).
Tensor run_case(DiffusionModel& model, const SafetensorsFile& inputs) {
  diffusion::Conditioning cond{.context = inputs.get("context"), .pooled = inputs.get("pooled"),
                               .guidance = inputs.get("guidance")};
  return model.predict(inputs.get("latents"), inputs.get("timestep"), cond);
}

TrainConfig save_config(LoraFormat format) {
  TrainConfig config;
  config.name = "flux_lora_files_test";
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

TEST(FluxLoraFiles, KohyaAndDiffusersPeftFilesLoadIntoTheRegistryModel) {
  SafetensorsFile lora_case = SafetensorsFile::open(flux_data("dev_lora_case.safetensors"));
  const Tensor want = lora_case.get("output");
  auto from_kohya = build_dev();
  load_lora(*from_kohya, flux_data("dev_lora_kohya.safetensors"));
  const Tensor kohya_out = run_case(*from_kohya, lora_case);
  auto from_peft = build_dev();
  load_lora(*from_peft, flux_data("dev_lora_peft.safetensors"));  // diffusers' file: alpha 8 / r 4 in its metadata
  const Tensor peft_out = run_case(*from_peft, lora_case);
  auto base = build_dev("");
  const double base_change = relative_to_max(run_case(*base, lora_case), want);
  const double kohya_error = relative_to_max(kohya_out, want), peft_error = relative_to_max(peft_out, want);
  std::printf("[flux LoRA files] registry model + dev_lora_kohya: %.3g, + dev_lora_peft: %.3g vs PEFT's output "
              "(the base alone is %.3g from it)\n",
              kohya_error, peft_error, base_change);
  EXPECT_LE(kohya_error, 1e-5);
  EXPECT_LE(peft_error, 1e-5);
  EXPECT_GT(base_change, 1e-2) << "the LoRA must change the output for the comparison to mean anything";
}

TEST(FluxLoraFiles, SavedFilesHaveTheKeysDiffusersAndKohyaWrite) {
  auto model = build_dev();
  load_lora(*model, flux_data("dev_lora_kohya.safetensors"));
  const std::filesystem::path dir = testing::scratch_dir("flux_lora_files");

  // PEFT: exactly diffusers' keys; each part's B·A is the file's scaled by its lora_alpha / r = 2.
  const std::string peft_path = (dir / "peft.safetensors").string();
  save_lora(*model, save_config(LoraFormat::Peft), peft_path, 7, "");
  LoraFile ours = read_lora_file(peft_path), theirs = read_lora_file(flux_data("dev_lora_peft.safetensors"));
  EXPECT_EQ(ours.format, LoraFileFormat::Peft);
  const std::set<std::string> our_keys = key_set(ours.tensors), their_keys = key_set(theirs.tensors);
  std::vector<std::string> missing, unexpected;
  std::set_difference(their_keys.begin(), their_keys.end(), our_keys.begin(), our_keys.end(),
                      std::back_inserter(missing));
  std::set_difference(our_keys.begin(), our_keys.end(), their_keys.begin(), their_keys.end(),
                      std::back_inserter(unexpected));
  EXPECT_EQ(our_keys.size(), 80u);
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
  EXPECT_EQ(n_parts, 40);
  const nlohmann::json adapter = nlohmann::json::parse(ours.metadata.at("lora_adapter_metadata"));
  EXPECT_EQ(adapter.at("transformer.r"), 4);
  EXPECT_EQ(adapter.at("transformer.lora_alpha"), 4.0);  // the scale is baked into lora_B
  EXPECT_EQ(ours.metadata.at("modelspec.architecture"), "flux-1-dev/lora");

  // kohya: exactly the keys of the kohya fixture, the same tensors.
  const std::string kohya_path = (dir / "kohya.safetensors").string();
  save_lora(*model, save_config(LoraFormat::Kohya), kohya_path, 7, "");
  LoraFile kohya = read_lora_file(kohya_path), kohya_fixture = read_lora_file(flux_data("dev_lora_kohya.safetensors"));
  EXPECT_EQ(key_set(kohya.tensors), key_set(kohya_fixture.tensors));
  for (const auto& [name, tensor] : kohya_fixture.tensors)
    EXPECT_TRUE(same_bits(kohya.tensors.at(name), tensor)) << name;
  EXPECT_EQ(kohya.metadata.at("ss_network_dim"), "4");
  EXPECT_EQ(kohya.metadata.at("ss_network_alpha"), "8");

  // Both load back to the same output.
  SafetensorsFile lora_case = SafetensorsFile::open(flux_data("dev_lora_case.safetensors"));
  const Tensor loaded = run_case(*model, lora_case);
  for (const std::string& path : {peft_path, kohya_path}) {
    auto again = build_dev();
    load_lora(*again, path);
    EXPECT_LE(relative_to_max(run_case(*again, lora_case), loaded), 1e-6) << path;
  }
}

// PEFT's DoRA (output axis, magnitude [out]) on the fused BFL layers equals PEFT's per-module DoRAs
// of diffusers' Linears: forward, loss gradients of lora_down, lora_up and the magnitude; and a PEFT
// file saved from it carries PEFT's tensors and loads back.
TEST(FluxLoraFiles, OutputAxisDoraMatchesPeftAndRoundTrips) {
  SafetensorsFile dora_case = SafetensorsFile::open(flux_data("dev_dora_case.safetensors"));
  auto model = build_dev("dora", nn::DoraAxis::Output);
  auto adapters = nn::find_adapters(*model);
  ASSERT_EQ(adapters.size(), 26u);
  for (auto& [path, adapter] : adapters) {
    auto dora = std::dynamic_pointer_cast<nn::DoRALinear>(adapter);
    ASSERT_NE(dora, nullptr) << path;
    copy_into(adapter->down_weight(), dora_case.get("bfl." + path + ".lora_down"));
    copy_into(adapter->up_weight(), dora_case.get("bfl." + path + ".lora_up"));
    copy_into(dora->magnitude(), dora_case.get("bfl." + path + ".magnitude"));
  }
  const Tensor output = run_case(*model, dora_case);
  const double output_error = relative_to_max(output, dora_case.get("output"));
  Tensor loss = autograd::mse_loss(flux::pack_latents(output), dora_case.get("target"));
  const double loss_error = std::fabs(loss.item() - dora_case.get("loss").item()) / dora_case.get("loss").item();
  autograd::GradientStore grads = autograd::backward(loss);
  double worst = 0;
  std::string worst_name;
  int n_grads = 0;
  for (auto& [path, adapter] : adapters) {
    auto dora = std::dynamic_pointer_cast<nn::DoRALinear>(adapter);
    for (const auto& [suffix, slot] : {std::pair<std::string, Tensor>{"lora_down", adapter->down_weight()},
                                       {"lora_up", adapter->up_weight()}, {"magnitude", dora->magnitude()}}) {
      const std::string name = path + "." + suffix;
      Tensor grad = grads.get(slot);
      ASSERT_TRUE(grad.defined()) << name << " got no gradient";
      const double error = relative_to_max(grad.reshape(slot.shape()), dora_case.get("grad.bfl." + name));
      EXPECT_LE(error, 1e-4) << name;
      if (error > worst) worst = error, worst_name = name;
      ++n_grads;
    }
  }
  std::printf("[flux DoRA, output axis] vs PEFT: output %.3g, loss %.3g, worst of %d gradients %.3g (%s)\n",
              output_error, loss_error, n_grads, worst, worst_name.c_str());
  EXPECT_LE(output_error, 1e-5);
  EXPECT_LE(loss_error, 1e-5);

  // Saved as PEFT: diffusers' module names, PEFT's magnitudes as they are, lora_B with alpha / r = 2.
  const std::string path = (testing::scratch_dir("flux_dora_files") / "dora_peft.safetensors").string();
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
  EXPECT_EQ(expected.size(), 120u);  // 40 diffusers Linears x (lora_A, lora_B, lora_magnitude_vector)
  EXPECT_EQ(key_set(saved.tensors), expected);
  EXPECT_EQ(nlohmann::json::parse(saved.metadata.at("lora_adapter_metadata")).at("transformer.use_dora"), true);
  auto again = build_dev("dora", nn::DoraAxis::Output);
  load_lora(*again, path);
  EXPECT_LE(relative_to_max(run_case(*again, dora_case), output), 1e-6);
  // The input-axis DoRA (kohya orientation) cannot read it, and says why.
  auto input_axis = build_dev("dora", nn::DoraAxis::Input);
  EXPECT_THAT(testing::error_of([&] { load_lora(*input_axis, path); }),
              HasSubstr("PEFT files carry the output-axis [out]"));
}

TEST(FluxLoraFiles, DiffusersFolderBuildsTheSameModelAsTheBflFile) {
  SafetensorsFile dev_case = SafetensorsFile::open(flux_data("dev_case.safetensors"));
  auto bfl = build_dev("");
  auto diffusers = build_dev("", nn::DoraAxis::Input, flux_data("dev_diffusers"));  // axes from its config.json
  const Tensor bfl_out = run_case(*bfl, dev_case), diffusers_out = run_case(*diffusers, dev_case);
  EXPECT_TRUE(same_bits(bfl_out, diffusers_out));
  const double error = relative_to_max(bfl_out, dev_case.get("output"));
  std::printf("[flux registry] dev_bfl and dev_diffusers: bitwise %s; vs diffusers' output %.3g\n",
              same_bits(bfl_out, diffusers_out) ? "equal" : "DIFFERENT", error);
  EXPECT_LE(error, 1e-5);
  // The BFL file does not record the RoPE axes: without model.axes_dim it is Flux.1's, which does
  // not fit the fixture's head width of 16, and the error says which key to set.
  const Architecture& arch = find_architecture("flux");
  const ModelConfig no_axes = dev_model_config(flux_data("dev_bfl.safetensors"), false);
  EXPECT_THAT(testing::error_of([&] { arch.build({.model = no_axes, .dtype = DType::F32}); }),
              HasSubstr("axes_dim [16, 56, 56] sums to 128 but the head width is 16"));
}

}  // namespace
}  // namespace wick
