// FLUX.2 (dev, klein) transformer weights in Black Forest Labs' names (the model's own: BFL's and
// ComfyUI's files) and in diffusers' Flux2Transformer2DModel names, loaded into the model; and how its
// fused layers appear in diffusers/PEFT LoRA files.
//
//   WeightSource source = WeightSource::open("FLUX.2-klein-base-4B", "transformer");   // or a single file
//   LoadedFlux2 loaded = flux2::load_transformer(source, {.dtype = DType::BF16});
//   Tensor v = loaded.model->forward(latents, sigma, context);
//   LoraLayout layout = flux2::lora_layout(flux2::layout_sizes(shapes));   // for to_peft / from_peft
//
// Layouts (detected in this order):
//   bfl        BFL's flux2-dev.safetensors and the klein files, ComfyUI's (the same names, optionally under
//              "model.diffusion_model." or "diffusion_model."); detected by single_stream_modulation.lin.weight.
//   diffusers  a transformer/ folder (sharded with an index, or one file); detected by
//              single_stream_modulation.linear.weight. q, k, v are concatenated by rows into img_attn.qkv /
//              txt_attn.qkv, norm_out.linear's halves are swapped into final_layer.adaLN_modulation.1 (diffusers
//              (scale, shift), BFL (shift, scale)); the rest are renames (MODELS2 B3).
// Sizes come from the shapes (flux2_config.h config_from_shapes); a diffusers config.json's axes_dims_rope
// is used when it has one.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/flux2/flux2.h"
#include "models/weights/key_map.h"
#include "models/weights/lora_format.h"

namespace wick::flux2 {

const WeightFormat& bfl_format();
const WeightFormat& diffusers_format();
// {bfl, diffusers}, in detection order.
const std::vector<WeightFormat>& weight_formats();
// detect_format(source, weight_formats()).
DetectedFormat detect_weight_format(const WeightSource& source);

// The RoPE widths of the diffusers config.json that belongs to `weights_path` (for a folder, its
// config.json or transformer/config.json; for a file, the config.json beside it) when it has
// axes_dims_rope, else empty (config_from_shapes' default). WickError (Data) for a malformed value.
std::vector<int64_t> axes_dim_of(const std::string& weights_path);

struct LoadOptions {
  DType dtype = DType::BF16;
  Device device = Device::cpu();
  std::vector<int64_t> axes_dim;  // empty: axes_dim_of(source.path()), else four equal axes
};

struct LoadedFlux2 {
  std::shared_ptr<Flux2Transformer> model;
  DetectedFormat format;
  LoadMappedReport report;
};

// Reads the sizes from the source's shapes (config_from_shapes), builds the model uninitialized and fills
// every parameter, frozen. Errors: WickError (Data) naming the source and the tensor, as load_mapped's
// (missing, unused and mismatched tensors) and config_from_shapes'.
LoadedFlux2 load_transformer(const WeightSource& source, const LoadOptions& options = {});

// The sizes the LoRA layout needs, read from BFL-named shapes (mapped_shapes, or a model's
// named_parameters): hidden = img_in.weight rows, block counts from the names. WickError (Data) when
// img_in.weight is absent.
struct LayoutSizes {
  int64_t hidden = 0;
  int64_t n_double = 0;
  int64_t n_single = 0;
};
LayoutSizes layout_sizes(const std::map<std::string, Shape>& bfl_shapes);

// Every Linear of FLUX.2 with its diffusers/PEFT name(s) (PEFT prefix "transformer."):
//   img_attn.qkv -> attn.to_q, to_k, to_v (hidden rows each); txt_attn.qkv -> attn.add_{q,k,v}_proj;
//   final_layer.adaLN_modulation.1 -> norm_out.linear, halves swapped; the rest one to one
//   (single_blocks.N.linear1 is diffusers' attn.to_qkv_mlp_proj, fused there too).
// guidance_in is listed whether or not the model has it.
LoraLayout lora_layout(const LayoutSizes& sizes);

}  // namespace wick::flux2
