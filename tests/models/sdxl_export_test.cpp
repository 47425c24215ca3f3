// A full SDXL fine-tune written back (Architecture::export_model -> sdxl::export_unet) in the layout its base came
// in: the tiny fixture UNet of tests/data/sdxl as the LDM single file (sgm names under model.diffusion_model., the
// VAE tensor beside them) and as the diffusers folder. The written file has exactly the base's tensor names, carries
// the trained values, keeps the other tensors unchanged, and trains again as a base with the same output.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "engine/autograd/node.h"
#include "engine/config/train_config.h"
#include "models/model_factory.h"
#include "models/registry.h"
#include "models/sdxl/sdxl_unet.h"
#include "runtime/ops/elementwise.h"
#include "runtime/safetensors.h"
#include "tests/models/weights_test_util.h"
#include "tests/test_data.h"

namespace wick {
namespace {

std::string sdxl_data(const std::string& name) { return testing::test_data_dir() + "/sdxl/" + name; }

std::shared_ptr<DiffusionModel> build_full(const std::string& base) {
  const TrainConfig config = parse_config_string(
      "name: export\nmodel: {arch: sdxl, name_or_path: " + base +
          ", head_dim: 8, norm_groups: 4, addition_time_embed_dim: 8}\n"
          "network: {type: full}\ndataset: {path: unused.h5}\n",
      "sdxl_export_test.yaml", config_schema());
  return build_model(config,
                     DataGeometry{.model_family = "sdxl", .latent_channels = 4, .latent_sizes = {{16, 16}},
                                  .text_length = 7, .text_dim = 32, .pooled_dim = 16},
                     Device::cpu());
}

Tensor run_case(DiffusionModel& model) {
  SafetensorsFile inputs = SafetensorsFile::open(sdxl_data("case.safetensors"));
  return dynamic_cast<sdxl::Unet&>(model).forward(inputs.get("latents_square"), inputs.get("timesteps"),
                                                  inputs.get("context"), inputs.get("pooled"), inputs.get("time_ids"));
}

std::set<std::string> names_of(const SafetensorsFile& file) {
  return std::set<std::string>(file.names().begin(), file.names().end());
}

std::string text_of(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

TEST(SdxlExport, FullModelWrittenBackInTheLayoutItCameFrom) {
  struct Layout {
    std::string base, base_file, trained_name, written;
  };
  const std::filesystem::path dir = testing::scratch_dir("sdxl_export");
  for (const Layout& l :
       {Layout{sdxl_data("tiny_ldm.safetensors"), sdxl_data("tiny_ldm.safetensors"),
               "model.diffusion_model.out.2.bias", "ldm.safetensors"},
        Layout{sdxl_data("tiny_diffusers"), sdxl_data("tiny_diffusers/diffusion_pytorch_model.safetensors"),
               "conv_out.bias", "diffusers/diffusion_pytorch_model.safetensors"}}) {
    SCOPED_TRACE(l.base);
    std::shared_ptr<DiffusionModel> model = build_full(l.base);
    EXPECT_EQ(model->n_parameters(true), model->n_parameters());
    Tensor bias = model->parameter("out.2.bias");
    autograd::detach(bias).copy_from(add(autograd::detach(bias), 0.25));  // "trained"
    const Tensor trained_output = run_case(*model);
    const std::string name = l.written.substr(0, l.written.find_first_of("./"));
    const std::filesystem::path written =
        find_architecture("sdxl").export_model(*model, dir, name, DType::F32, {{"wick_step", "1"}});
    EXPECT_EQ(written, dir / (l.written.find('/') == std::string::npos ? l.written : name));
    SafetensorsFile base = SafetensorsFile::open(l.base_file), out = SafetensorsFile::open((dir / l.written).string());
    EXPECT_EQ(names_of(out), names_of(base));
    for (const std::string& tensor : base.names()) {
      const bool same = base.get(tensor).to_vector<float>() == out.get(tensor).to_vector<float>();
      EXPECT_EQ(same, tensor != l.trained_name) << tensor;
    }
    if (l.written.find('/') != std::string::npos) {
      EXPECT_EQ(text_of(written / "config.json"), text_of(sdxl_data("tiny_diffusers/config.json")));
    }
    // It trains again as a base: the same output as the model that wrote it.
    std::shared_ptr<DiffusionModel> again = build_full(written.string());
    EXPECT_EQ(run_case(*again).to_vector<float>(), trained_output.to_vector<float>());
  }
}

}  // namespace
}  // namespace wick
