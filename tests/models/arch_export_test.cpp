// A full fine-tune written back (Architecture::export_model) in the layout its base came in, one row per architecture
// and base layout (tests/models/tiny_arch.h): the written file has exactly the base's tensor names, carries the
// trained values, keeps the other tensors unchanged, and trains again as a base with the same output. SDXL writes
// the LDM single file (sgm names under model.diffusion_model., the VAE tensor beside them) and the diffusers folder;
// Flux and SD3 write their own (BFL's, SAI's) names, the layout of their single files; Z-Image writes ComfyUI's single
// file (the fused qkv, its norm_final kept) from a ComfyUI base (its diffusers folder: zimage_weights_test.cpp);
// Qwen-Image writes ComfyUI's single file (diffusers' names under model.diffusion_model.) from a ComfyUI base and a
// diffusers folder (with the base's config.json) from a diffusers folder.
//
// A new architecture adds a row to kRows for each base layout it writes back.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <ostream>
#include <set>
#include <sstream>
#include <string>

#include "engine/autograd/node.h"
#include "runtime/ops/elementwise.h"
#include "tests/models/tiny_arch.h"
#include "tests/models/weights_test_util.h"

namespace wick {
namespace {

using testing::TinyArch;
using testing::tiny_arch;

struct ExportRow {
  const TinyArch* arch;
  std::string layout;     // for the test's name
  std::string base;       // the base weights, a file or folder under tests/data/<arch>/
  std::string base_file;  // the base's safetensors file (the folder's, for a folder)
  std::string trained;    // the parameter the test "trains" (the model's name)
  std::string trained_name;  // its name in the base file
  std::string written;    // what export_model writes, under its directory: <name>.safetensors or <name>/<file>
};

void PrintTo(const ExportRow& row, std::ostream* os) { *os << row.arch->name << " " << row.layout; }

const ExportRow kRows[] = {
    {.arch = &tiny_arch("flux"), .layout = "bfl", .base = "dev_bfl.safetensors", .base_file = "dev_bfl.safetensors",
     .trained = "final_layer.linear.bias", .trained_name = "final_layer.linear.bias", .written = "bfl.safetensors"},
    {.arch = &tiny_arch("sd3"), .layout = "sai", .base = "medium_sai.safetensors",
     .base_file = "medium_sai.safetensors", .trained = "final_layer.linear.bias",
     .trained_name = "final_layer.linear.bias", .written = "sai.safetensors"},
    {.arch = &tiny_arch("sdxl"), .layout = "ldm", .base = "tiny_ldm.safetensors", .base_file = "tiny_ldm.safetensors",
     .trained = "out.2.bias", .trained_name = "model.diffusion_model.out.2.bias", .written = "ldm.safetensors"},
    {.arch = &tiny_arch("sdxl"), .layout = "diffusers", .base = "tiny_diffusers",
     .base_file = "tiny_diffusers/diffusion_pytorch_model.safetensors", .trained = "out.2.bias",
     .trained_name = "conv_out.bias", .written = "diffusers/diffusion_pytorch_model.safetensors"},
    {.arch = &tiny_arch("zimage"), .layout = "comfyui", .base = "comfyui_bf16.safetensors",
     .base_file = "comfyui_bf16.safetensors", .trained = "all_final_layer.2-1.linear.bias",
     .trained_name = "model.diffusion_model.final_layer.linear.bias", .written = "comfyui.safetensors"},
    {.arch = &tiny_arch("qwenimage"), .layout = "comfyui", .base = "comfyui_bf16.safetensors",
     .base_file = "comfyui_bf16.safetensors", .trained = "proj_out.bias",
     .trained_name = "model.diffusion_model.proj_out.bias", .written = "comfyui.safetensors"},
    {.arch = &tiny_arch("qwenimage"), .layout = "diffusers", .base = "transformer",
     .base_file = "transformer/diffusion_pytorch_model.safetensors", .trained = "proj_out.bias",
     .trained_name = "proj_out.bias", .written = "diffusers/diffusion_pytorch_model.safetensors"},
};

struct ExportRowName {
  std::string operator()(const ::testing::TestParamInfo<ExportRow>& info) const {
    return info.param.arch->name + "_" + info.param.layout;
  }
};

class ArchExport : public ::testing::TestWithParam<ExportRow> {};

std::shared_ptr<DiffusionModel> build_full(const TinyArch& arch, const std::string& base) {
  return arch.build("", "network: {type: full}\n", base);
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

TEST_P(ArchExport, FullModelWrittenBackInTheLayoutItCameFrom) {
  const ExportRow& row = GetParam();
  const TinyArch& arch = *row.arch;
  const std::filesystem::path dir = testing::scratch_dir(arch.name + "_export_" + row.layout);
  SafetensorsFile inputs = SafetensorsFile::open(arch.data(arch.cases + "case.safetensors"));
  std::shared_ptr<DiffusionModel> model = build_full(arch, arch.data(row.base));
  EXPECT_EQ(model->n_parameters(true), model->n_parameters());
  Tensor bias = model->parameter(row.trained);
  autograd::detach(bias).copy_from(add(autograd::detach(bias), 0.25));  // "trained"
  const Tensor trained_output = arch.forward(*model, inputs);
  const std::string name = row.written.substr(0, row.written.find_first_of("./"));
  const bool folder = row.written.find('/') != std::string::npos;
  const std::filesystem::path written =
      find_architecture(arch.name).export_model(*model, dir, name, DType::F32, {{"wick_step", "1"}});
  EXPECT_EQ(written, dir / (folder ? name : row.written));
  SafetensorsFile base = SafetensorsFile::open(arch.data(row.base_file));
  SafetensorsFile out = SafetensorsFile::open((dir / row.written).string());
  EXPECT_EQ(names_of(out), names_of(base));
  for (const std::string& tensor : base.names()) {
    const bool same = base.get(tensor).to_vector<float>() == out.get(tensor).to_vector<float>();
    EXPECT_EQ(same, tensor != row.trained_name) << tensor;
  }
  if (folder) {
    EXPECT_EQ(text_of(written / "config.json"), text_of(arch.data(row.base + "/config.json")));
  }
  // It trains again as a base: the same output as the model that wrote it.
  std::shared_ptr<DiffusionModel> again = build_full(arch, written.string());
  EXPECT_EQ(arch.forward(*again, inputs).to_vector<float>(), trained_output.to_vector<float>());
}

INSTANTIATE_TEST_SUITE_P(Arch, ArchExport, ::testing::ValuesIn(kRows), ExportRowName());

}  // namespace
}  // namespace wick
