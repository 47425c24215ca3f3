// Z-Image transformer weights in the three layouts users download, loaded into the model's own
// (the authors' = diffusers') names.
//
//   WeightSource source = WeightSource::open("Z-Image-Turbo", "transformer");   // or a ComfyUI file
//   LoadedZImage loaded = zimage::load_transformer(source, {.dtype = DType::BF16});
//   std::vector<Tensor> out = loaded.model->forward(latents, t, captions);
//
// Layouts (detected in this order):
//   diffusers  the authors' and diffusers' names (the `transformer/` folder of Tongyi-MAI/Z-Image-Turbo
//              and Z-Image, sharded with an index, or one file); detected by all_x_embedder.2-1.weight
//              and layers.0.attention.to_q.weight.
//   comfyui    ComfyUI's / Lumina's single file (z_image_turbo_bf16.safetensors), names optionally under
//              "model.diffusion_model." or "diffusion_model.": attention.qkv (rows q | k | v) split
//              into to_q, to_k, to_v; attention.out -> to_out.0; q_norm / k_norm -> norm_q / norm_k;
//              x_embedder -> all_x_embedder.2-1; final_layer -> all_final_layer.2-1; norm_final (a
//              Lumina leftover the model does not use) ignored. Detected by x_embedder.weight and
//              layers.0.attention.qkv.weight.
// Float8 (ComfyUI's fp8 files, in either layout): Linear weights stored F8_E4M3, with a per-tensor or
// per-row `scale_weight` / `weight_scale` beside them (or none: scale 1), become float8 Linears
// (nn::Linear's float8 mode, models/weights/float8_weights.h) holding zero-copy views of the codes; a
// fused F8 attention.qkv is split by rows into the float8 to_q, to_k, to_v, each with its rows' scale.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <optional>
#include <vector>

#include "models/weights/key_map.h"
#include "models/zimage/zimage.h"

namespace wick::zimage {

const WeightFormat& diffusers_format();
const WeightFormat& comfyui_format();
// {diffusers, comfyui}, in detection order.
const std::vector<WeightFormat>& weight_formats();
// detect_format(source, weight_formats()).
DetectedFormat detect_weight_format(const WeightSource& source);

struct LoadOptions {
  DType dtype = DType::BF16;  // the model's parameters (float8 Linears keep their codes)
  Device device = Device::cpu();
  // The RoPE layout; unset: rope_from_config_json(source.path()) (config.json beside the weights,
  // else the released model's).
  std::optional<ZImageRope> rope;
};

struct LoadedZImage {
  std::shared_ptr<ZImageTransformer> model;
  DetectedFormat format;
  LoadMappedReport report;
  std::vector<std::string> float8_layers;  // module paths of the Linears loaded as float8
};

// Writes a trained transformer (a full fine-tune) in `dtype` the way its weights were read (model.weight_origin()), so
// that it loads where the base does:
//   comfyui: <directory>/<name>.safetensors with ComfyUI's names under the base's prefix (to_q | to_k | to_v fused
//     back into attention.qkv, the renames undone) and every other tensor of the base file (norm_final) unchanged;
//   diffusers (or no origin): the folder <directory>/<name>/ with one diffusion_pytorch_model.safetensors in the
//     model's (= diffusers') names and the base's config.json (none when the base had none).
// Returns the file or folder written. WickError (Config) for float8 Linears (a full fine-tune trains no float8 base).
std::filesystem::path export_transformer(const ZImageTransformer& model, const std::filesystem::path& directory,
                                         const std::string& name, DType dtype,
                                         const std::map<std::string, std::string>& metadata);

// Reads the sizes from the source's shapes (config_from_shapes, after the format's renames; float8
// scales left aside), builds the model uninitialized and fills every parameter, frozen. Errors:
// WickError (Data) naming the source, as load_mapped's (missing, unused and mismatched tensors,
// up to ten of each) and config_from_shapes'.
LoadedZImage load_transformer(const WeightSource& source, const LoadOptions& options = {});

}  // namespace wick::zimage
