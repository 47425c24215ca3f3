// Qwen-Image transformer weights in the layouts users download, loaded into the model's own
// (diffusers') names.
//
//   WeightSource source = WeightSource::open("Qwen-Image", "transformer");   // or a ComfyUI file
//   LoadedQwenImage loaded = qwenimage::load_transformer(source, {.dtype = DType::BF16});
//   Tensor v = loaded.model->forward(latents, sigma, context, context_mask);
//
// Layouts (detected in this order):
//   diffusers  the HF release's transformer/ folder (sharded with an index, or one file); detected by
//              txt_norm.weight and transformer_blocks.0.attn.add_q_proj.weight.
//   comfyui    ComfyUI's single files (qwen_image_bf16.safetensors, qwen_image_edit_2509/2511_*): the same
//              names under "model.diffusion_model." or "diffusion_model.". Edit-2511's files carry the
//              marker tensor __index_timestep_zero__, which turns zero_cond_t on and is not loaded.
// ComfyUI's float8 ("scaled fp8") files are not handled yet (zimage_weights.h has the float8 path to follow).
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/qwenimage/qwenimage.h"
#include "models/weights/key_map.h"

namespace wick::qwenimage {

const WeightFormat& diffusers_format();
const WeightFormat& comfyui_format();
// {diffusers, comfyui}, in detection order.
const std::vector<WeightFormat>& weight_formats();
// detect_format(source, weight_formats()).
DetectedFormat detect_weight_format(const WeightSource& source);

struct LoadOptions {
  DType dtype = DType::BF16;
  Device device = Device::cpu();
  // What shapes do not give (RoPE axes, patch size, zero_cond_t); unset: config_json_of(source.path())
  // (the config.json beside the weights, else the released model's). Edit-2511's marker tensor turns
  // zero_cond_t on either way.
  std::optional<QwenImageJson> json;
};

struct LoadedQwenImage {
  std::shared_ptr<QwenImageTransformer> model;
  DetectedFormat format;
  LoadMappedReport report;
};

// Reads the sizes from the source's shapes (config_from_shapes), builds the model uninitialized and
// fills every parameter, frozen. Errors: WickError (Data) naming the source and the tensor, as
// load_mapped's (missing, unused and mismatched tensors) and config_from_shapes'.
LoadedQwenImage load_transformer(const WeightSource& source, const LoadOptions& options = {});

// A full fine-tune's model written back in the layout its base came in (model.weight_origin()), so that it loads where
// the base does: ComfyUI's single file <directory>/<name>.safetensors (the base's prefix, and Edit-2511's marker
// tensor when the base has it), else a diffusers folder <directory>/<name>/ (diffusion_pytorch_model.safetensors and
// the base's config.json when there is one). Every parameter in `dtype`. Returns the file or folder written; Config
// error for a model with float8 parameters.
std::filesystem::path export_transformer(const QwenImageTransformer& model, const std::filesystem::path& directory,
                                         const std::string& name, DType dtype,
                                         const std::map<std::string, std::string>& metadata);

}  // namespace wick::qwenimage
