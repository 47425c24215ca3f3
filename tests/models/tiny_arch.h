// The tiny fixture model of each pretrained architecture (tests/data/<arch>/, written by
// tests/reference/make_<arch>_fixtures.py), for the table-driven model tests: arch_lora_files_test.cpp,
// arch_block_swap_test.cpp, arch_float8_test.cpp and arch_export_test.cpp. A row of their tables names one of these
// and adds what its check needs; a new architecture adds its TinyArch to tiny_archs() and a row to each table.
//
//   const TinyArch& arch = tiny_arch("sd3");
//   auto model = arch.build(", quantize: float8", arch.lora_network());     // as `wick train` builds it
//   SafetensorsFile inputs = SafetensorsFile::open(arch.data(arch.cases + "lora_case.safetensors"));
//   copy_case_factors(arch, *model, inputs);                               // the case's lora_down / lora_up
//   Tensor output = arch.forward(*model, inputs);                          // vs inputs.get("output")
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/autograd/node.h"
#include "engine/autograd/ops_join.h"
#include "engine/autograd/ops_layout.h"
#include "engine/config/train_config.h"
#include "models/flux/flux.h"
#include "models/model_factory.h"
#include "models/nn/adapters.h"
#include "models/qwenimage/qwenimage.h"
#include "models/registry.h"
#include "models/sd3/sd3.h"
#include "models/sdxl/sdxl_unet.h"
#include "models/zimage/zimage.h"
#include "runtime/safetensors.h"
#include "tests/models/arch_test_util.h"
#include "tests/test_data.h"

namespace wick::testing {

struct TinyArch {
  std::string name;            // the registry's name; its fixtures are under tests/data/<name>/
  std::string base;            // the original single file ("dev_bfl.safetensors")
  std::string diffusers;       // the same weights as diffusers' folder
  std::string model_keys;      // `model:` keys the single file needs besides arch and name_or_path (YAML flow entries)
  std::string diffusers_keys;  // those the diffusers folder needs (its config.json has the others)
  DataGeometry geometry;       // the dataset geometry of its cases
  std::string cases;           // the case files' prefix: <cases>case, <cases>lora_case, <cases>float8_lora_case, ...
  std::string factors;         // the case files name adapter P's factors <factors>.P.lora_down / .lora_up / .magnitude
  std::string locon;           // the `network:` keys of the LoCon convolutions in its lora_case ("" = none)
  std::string case_target;     // the `network:` target of its cases' adapters ("" = the default preset)
  std::string output;          // the output of <cases>case that forward's inputs give
  // The top-level modules outside its blocks (block_paths): embedders and output head, which stay f32 and resident.
  std::vector<std::string> outside_blocks;
  // The model's output on a case file's inputs, through its own forward (the case's time as the model takes it).
  Tensor (*forward)(DiffusionModel& model, const SafetensorsFile& inputs);
  // The output in the layout of the case's target (Flux: packed into 2x2 patches).
  Tensor (*as_target)(const Tensor& output);

  std::string data(const std::string& file) const { return test_data_dir() + "/" + name + "/" + file; }
  // A training config on `weights` (default: the base file): the model keys (the diffusers folder's for it),
  // `model_extra` (", quantize: float8") and the YAML `sections` (network:, train:, save:).
  TrainConfig config(const std::string& model_extra, const std::string& sections, std::string weights = "") const {
    if (weights.empty()) weights = data(base);
    const std::string& keys = weights == data(diffusers) ? diffusers_keys : model_keys;
    const std::string yaml = "name: " + name + "_tiny\ndevice: cpu\nmodel: {arch: " + name + ", name_or_path: " +
                             weights + (keys.empty() ? "" : ", " + keys) + model_extra + "}\n" + sections +
                             "dataset: {path: unused.h5}\n";
    return parse_config_string(yaml, "<" + name + " test>", config_schema());
  }
  // The registry's model on `weights`, f32, without adapters (Architecture::build).
  std::shared_ptr<DiffusionModel> build_base(const std::string& weights = "") const {
    const TrainConfig c = config("", "", weights);
    return find_architecture(name).build({.model = c.model, .data = geometry, .dtype = DType::F32});
  }
  // The model `wick train` builds for that config on the case geometry.
  std::shared_ptr<DiffusionModel> build(const std::string& model_extra, const std::string& sections,
                                        const std::string& weights = "") const {
    return build_model(config(model_extra, sections, weights), geometry, Device::cpu());
  }
  // The `network:` (and `save:`) sections of its cases' adapters: lora_case's LoRA rank 4, alpha 8 on the default
  // preset (with its LoCon convolutions), or DoRA rank 4, alpha 8 with the magnitude of `format`'s orientation.
  std::string lora_network(const std::string& type = "lora", const std::string& format = "peft") const {
    if (type == "lora") return "network: {type: lora, linear: 4, linear_alpha: 8" + locon + case_target + "}\n";
    return "network: {type: " + type + ", linear: 4, linear_alpha: 8" + case_target + "}\nsave: {format: " + format +
           "}\n";
  }
};

inline Tensor flux_forward(DiffusionModel& model, const SafetensorsFile& in) {
  return dynamic_cast<flux::FluxTransformer&>(model).forward(in.get("latents"), in.get("timestep"), in.get("context"),
                                                             in.get("pooled"), in.get("guidance"));
}
inline Tensor sd3_forward(DiffusionModel& model, const SafetensorsFile& in) {
  return dynamic_cast<sd3::MMDiT&>(model).forward(in.get("latents_square"), in.get("sigma"), in.get("context"),
                                                  in.get("pooled"));
}
inline Tensor sdxl_forward(DiffusionModel& model, const SafetensorsFile& in) {
  return dynamic_cast<sdxl::Unet&>(model).forward(in.get("latents_square"), in.get("timesteps"), in.get("context"),
                                                  in.get("pooled"), in.get("time_ids"));
}
// Z-Image's cases hold one batch of two sizes (latents_0/1, caption_0/1, timestep): its output is the two samples'
// flattened and concatenated, as the cases' "output" and "target" are.
inline Tensor zimage_forward(DiffusionModel& model, const SafetensorsFile& in) {
  const std::vector<Tensor> out = dynamic_cast<zimage::ZImageTransformer&>(model).forward(
      {in.get("latents_0"), in.get("latents_1")}, in.get("timestep"), {in.get("caption_0"), in.get("caption_1")});
  return autograd::concat({autograd::flatten(out[0]), autograd::flatten(out[1])}, 0);
}
// Qwen-Image's cases: a padded batch of two (latents [2, 16, 6, 10], context [2, 9, 32] with context_mask, sigma).
inline Tensor qwenimage_forward(DiffusionModel& model, const SafetensorsFile& in) {
  return dynamic_cast<qwenimage::QwenImageTransformer&>(model).forward(in.get("latents"), in.get("sigma"),
                                                                       in.get("context"), in.get("context_mask"));
}
inline Tensor unchanged(const Tensor& output) { return output; }

// Flux.1-dev (2 double + 2 single blocks), the SD3.5-Medium-like MMDiT (3 joint blocks, attn2 in 0 and 1, the last
// pre-only), the SDXL UNet (3 levels, 19 blocks), Z-Image (2 layers + 1 noise and 1 context refiner) and Qwen-Image
// (2 dual-stream blocks); their READMEs give every size.
inline const std::vector<TinyArch>& tiny_archs() {
  static const std::vector<TinyArch> archs = {
      {.name = "flux", .base = "dev_bfl.safetensors", .diffusers = "dev_diffusers",
       .model_keys = "axes_dim: [4, 6, 6]",  // the BFL file does not record the RoPE axes; config.json does
       .diffusers_keys = "",
       .geometry = {.model_family = "flux", .latent_channels = 4, .latent_sizes = {{6, 10}}, .text_length = 7,
                    .text_dim = 32, .pooled_dim = 24},
       .cases = "dev_", .factors = "bfl", .locon = "", .output = "output",
       .outside_blocks = {"img_in", "txt_in", "time_in", "vector_in", "guidance_in", "final_layer"},
       .forward = flux_forward, .as_target = flux::pack_latents},
      {.name = "sd3", .base = "medium_sai.safetensors", .diffusers = "medium_diffusers", .model_keys = "",
       .diffusers_keys = "",
       .geometry = {.model_family = "sd3", .latent_channels = 16, .latent_sizes = {{8, 8}, {6, 10}},
                    .text_length = 7, .text_dim = 32, .pooled_dim = 64},
       .cases = "medium_", .factors = "sai", .locon = "", .output = "output_square",
       .outside_blocks = {"x_embedder", "context_embedder", "t_embedder", "y_embedder", "pos_embed", "final_layer"},
       .forward = sd3_forward, .as_target = unchanged},
      {.name = "sdxl", .base = "tiny_ldm.safetensors", .diffusers = "tiny_diffusers",
       .model_keys = "head_dim: 8, norm_groups: 4, addition_time_embed_dim: 8",
       .diffusers_keys = "head_dim: 8, norm_groups: 4, addition_time_embed_dim: 8",
       .geometry = {.model_family = "sdxl", .latent_channels = 4, .latent_sizes = {{16, 16}}, .text_length = 7,
                    .text_dim = 32, .pooled_dim = 16},
       .cases = "", .factors = "ldm", .locon = ", conv: 2, conv_alpha: 1", .output = "output_square",
       .outside_blocks = {"time_embed", "label_emb", "out"}, .forward = sdxl_forward, .as_target = unchanged},
      // The model's names are diffusers': its "original" is the transformer/ folder, its "diffusers" the pipeline
      // folder around it; model.axes_dims gives the ComfyUI file (which records no RoPE layout) the tiny layout.
      {.name = "zimage", .base = "diffusers/transformer", .diffusers = "diffusers",
       .model_keys = "axes_dims: [8, 12, 12]", .diffusers_keys = "axes_dims: [8, 12, 12]",
       .geometry = {.model_family = "zimage", .latent_channels = 16, .latent_sizes = {{6, 10}, {8, 4}},
                    .text_length = 40, .text_dim = 32, .pooled_dim = 0},
       .cases = "", .factors = "lora", .locon = "", .case_target = ", target: [attention_mlp]", .output = "output",
       .outside_blocks = {"t_embedder", "cap_embedder", "all_x_embedder", "all_final_layer", "x_pad_token",
                          "cap_pad_token"},
       .forward = zimage_forward, .as_target = unchanged},
      // The model's names are diffusers': its "original" is ComfyUI's single file (the same names under
      // model.diffusion_model.), which records no RoPE layout: model.axes_dims gives it the tiny one (the diffusers
      // folder's config.json has it). Its cases' adapters are the default preset's 28 Linears (14 per block); the
      // case's f32 reference is output_exact (diffusers with a correctly rounded sinusoid table: README).
      {.name = "qwenimage", .base = "comfyui_bf16.safetensors", .diffusers = "transformer",
       .model_keys = "axes_dims: [8, 12, 12]", .diffusers_keys = "",
       .geometry = {.model_family = "qwenimage", .latent_channels = 16, .latent_sizes = {{6, 10}}, .text_length = 9,
                    .text_dim = 32, .pooled_dim = 0},
       .cases = "", .factors = "lora", .locon = "", .case_target = "", .output = "output_exact",
       .outside_blocks = {"time_text_embed", "txt_norm", "img_in", "txt_in", "norm_out", "proj_out"},
       .forward = qwenimage_forward, .as_target = unchanged},
  };
  return archs;
}

// Whether a parameter or module path lies outside the blocks (its first component is one of outside_blocks).
inline bool is_outside_blocks(const TinyArch& arch, const std::string& path) {
  const std::string top = path.substr(0, path.find('.'));
  return std::find(arch.outside_blocks.begin(), arch.outside_blocks.end(), top) != arch.outside_blocks.end();
}

inline const TinyArch& tiny_arch(const std::string& name) {
  for (const TinyArch& arch : tiny_archs())
    if (arch.name == name) return arch;
  throw std::runtime_error("tests/models/tiny_arch.h: no tiny fixture model for '" + name + "'");
}

// Writes `value` (any shape of the same size) into a parameter slot, outside autograd.
inline void copy_factor(Tensor& slot, const Tensor& value) {
  autograd::detach(slot).copy_from(value.reshape(slot.shape()));
}

// The case file's lora_down, lora_up (and DoRA magnitude) of every adapter of `model`.
inline void copy_case_factors(const TinyArch& arch, DiffusionModel& model, const SafetensorsFile& inputs) {
  for (auto& [path, adapter] : nn::find_adapters(model)) {
    copy_factor(adapter->down_weight(), inputs.get(arch.factors + "." + path + ".lora_down"));
    copy_factor(adapter->up_weight(), inputs.get(arch.factors + "." + path + ".lora_up"));
    if (auto dora = std::dynamic_pointer_cast<nn::DoRALinear>(adapter))
      copy_factor(dora->magnitude(), inputs.get(arch.factors + "." + path + ".magnitude"));
  }
}

// For INSTANTIATE_TEST_SUITE_P: a row's name is its architecture's (rows hold `const TinyArch* arch`).
struct RowName {
  template <typename Row>
  std::string operator()(const ::testing::TestParamInfo<Row>& info) const {
    return info.param.arch->name;
  }
};

}  // namespace wick::testing
