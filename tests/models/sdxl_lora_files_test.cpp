// SDXL LoRA files: the model `wick train` builds (build_model: the registry's sdxl on tests/data/sdxl/tiny_ldm,
// LoRA rank 4 / alpha 8 on the default preset and LoCon rank 2 / alpha 1 through network.conv) carries exactly the
// fixture's PEFT adapters and gives PEFT's output; its kohya file has exactly the keys diffusers' SDXL LoRA loader
// converts (tests/data/sdxl/lora_kohya_diffusers_keys.json, written by diffusers 0.42.1 from the fixture's kohya
// file) and each names the same module in diffusers' layout as wick's own LDM -> diffusers map; the file loads back.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "engine/autograd/node.h"
#include "engine/config/train_config.h"
#include "models/lora_files.h"
#include "models/model_factory.h"
#include "models/nn/adapters.h"
#include "models/registry.h"
#include "models/sdxl/sdxl_unet.h"
#include "models/sdxl/sdxl_weights.h"
#include "models/weights/lora_format.h"
#include "runtime/safetensors.h"
#include "tests/models/weights_test_util.h"
#include "tests/test_data.h"

namespace wick {
namespace {

std::string sdxl_data(const std::string& name) { return testing::test_data_dir() + "/sdxl/" + name; }

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

TrainConfig lora_config() {
  return parse_config_string("name: sdxl_lora_files_test\n"
                             "model: {arch: sdxl, name_or_path: " + sdxl_data("tiny_ldm.safetensors") +
                                 ", head_dim: 8, norm_groups: 4, addition_time_embed_dim: 8}\n"
                                 "network: {type: lora, linear: 4, linear_alpha: 8, conv: 2, conv_alpha: 1}\n"
                                 "dataset: {path: unused.h5}\n"
                                 "save: {dtype: f32}\n",
                             "sdxl_lora_files_test.yaml", config_schema());
}

std::shared_ptr<DiffusionModel> build(const TrainConfig& config) {
  return build_model(config,
                     DataGeometry{.model_family = "sdxl", .latent_channels = 4, .latent_sizes = {{16, 16}},
                                  .text_length = 7, .text_dim = 32, .pooled_dim = 16},
                     Device::cpu());
}

Tensor run_case(DiffusionModel& model, const SafetensorsFile& inputs) {
  auto& unet = dynamic_cast<sdxl::Unet&>(model);
  return unet.forward(inputs.get("latents_square"), inputs.get("timesteps"), inputs.get("context"),
                      inputs.get("pooled"), inputs.get("time_ids"));
}

TEST(SdxlLoraFiles, TrainedModelKohyaFileAndDiffusersKeys) {
  const TrainConfig config = lora_config();
  EXPECT_EQ(config.save.format, LoraFormat::Kohya);  // sdxl's default
  std::shared_ptr<DiffusionModel> model = build(config);
  SafetensorsFile lora_case = SafetensorsFile::open(sdxl_data("lora_case.safetensors"));
  // The factory's adapters are the fixture's 257 modules, with its ranks; the fixture's factors give PEFT's output.
  std::set<std::string> fixture_modules, ours;
  for (const std::string& name : lora_case.names())
    if (name.rfind("ldm.", 0) == 0 && name.size() > 10 && name.compare(name.size() - 10, 10, ".lora_down") == 0)
      fixture_modules.insert(name.substr(4, name.size() - 14));
  for (auto& [path, adapter] : nn::find_adapters(*model)) {
    ours.insert(path);
    SCOPED_TRACE(path);
    const Tensor down = lora_case.get("ldm." + path + ".lora_down"), up = lora_case.get("ldm." + path + ".lora_up");
    EXPECT_EQ(adapter->options().rank, down.size(0));
    EXPECT_EQ(adapter->options().alpha, down.dim() == 4 && down.size(2) == 3 ? 1.0 : 8.0);
    autograd::detach(adapter->down_weight()).copy_from(down.reshape(adapter->down_weight().shape()));
    autograd::detach(adapter->up_weight()).copy_from(up.reshape(adapter->up_weight().shape()));
  }
  EXPECT_EQ(ours, fixture_modules);
  const Tensor output = run_case(*model, lora_case);
  const double error = relative_to_max(output, lora_case.get("output"));
  EXPECT_LE(error, 1e-5);

  // The kohya file: exactly the down / up keys diffusers converts, each to the module wick's map names.
  const std::string path = (testing::scratch_dir("sdxl_lora_files") / "kohya.safetensors").string();
  save_lora(*model, config, path, 3, "");
  LoraFile file = read_lora_file(path);
  EXPECT_EQ(file.format, LoraFileFormat::Kohya);
  std::ifstream json_in(sdxl_data("lora_kohya_diffusers_keys.json"));
  const nlohmann::json diffusers_keys = nlohmann::json::parse(json_in);
  const std::vector<sdxl::ModuleRename> renames =
      sdxl::module_renames(sdxl::layout_of(dynamic_cast<sdxl::Unet&>(*model).config()));
  std::set<std::string> factor_keys;
  int64_t n_alpha = 0;
  for (const auto& [key, tensor] : file.tensors) {
    if (key.size() > 6 && key.compare(key.size() - 6, 6, ".alpha") == 0) {
      ++n_alpha;
      continue;
    }
    factor_keys.insert(key);
  }
  std::set<std::string> listed;
  for (const auto& [key, value] : diffusers_keys.items()) listed.insert(key);
  EXPECT_EQ(factor_keys, listed);
  EXPECT_EQ(n_alpha, 257);
  int64_t n_checked = 0;
  for (auto& [module, adapter] : nn::find_adapters(*model)) {
    std::string kohya = "lora_unet_" + module;
    std::replace(kohya.begin(), kohya.end(), '.', '_');
    const std::string diffusers = sdxl::ldm_to_diffusers(module, renames);
    ASSERT_TRUE(diffusers_keys.contains(kohya + ".lora_down.weight")) << kohya;
    EXPECT_EQ(diffusers_keys[kohya + ".lora_down.weight"], diffusers + ".lora_A.weight");
    EXPECT_EQ(diffusers_keys[kohya + ".lora_up.weight"], diffusers + ".lora_B.weight");
    ++n_checked;
  }
  EXPECT_EQ(file.metadata["ss_base_model_version"], "sdxl_base_v1-0");
  EXPECT_EQ(file.metadata["modelspec.architecture"], "stable-diffusion-xl-v1-base/lora");

  // It loads back into a freshly built model: the same output.
  std::shared_ptr<DiffusionModel> again = build(config);
  load_lora(*again, path);
  const double reload = relative_to_max(run_case(*again, lora_case), output);
  std::printf("[sdxl LoRA files] build_model + the fixture's factors vs PEFT: %.3g; kohya file: %zu keys = "
              "diffusers' converted set, %lld modules named as diffusers names them; reloaded: %.3g\n",
              error, file.tensors.size(), static_cast<long long>(n_checked), reload);
  EXPECT_EQ(reload, 0.0);
}

}  // namespace
}  // namespace wick
