// Flux.1 (dev, schnell) weights in Black Forest Labs' names (the model's own) and in diffusers'
// FluxTransformer2DModel names, and how Flux's fused layers appear in diffusers/PEFT LoRA files.
//
//   WeightSource source = WeightSource::open("FLUX.1-dev", "transformer");   // or flux1-dev.safetensors
//   DetectedFormat format = flux::detect_weight_format(source);              // "bfl" or "diffusers"
//   std::map<std::string, Shape> shapes = mapped_shapes(source, format);     // BFL names
//   load_mapped(*model, source, format);
//   LoraLayout layout = flux::lora_layout(flux::layout_sizes(shapes));       // for to_peft / from_peft
//
// bfl: native names, optionally under "model.diffusion_model." or "diffusion_model." (ComfyUI repacks);
// detected by double_blocks.0.img_attn.norm.key_norm.scale. diffusers: detected by
// transformer_blocks.0.attn.norm_added_k.weight; q, k, v (+ proj_mlp in single blocks) are
// concatenated by rows into img_attn.qkv, txt_attn.qkv and linear1, and norm_out.linear's halves are
// swapped into final_layer.adaLN_modulation.1. Block counts come from the source; guidance_in (dev)
// is mapped when the source has it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "models/weights/key_map.h"
#include "models/weights/lora_format.h"

namespace wick::flux {

const WeightFormat& bfl_format();
const WeightFormat& diffusers_format();
// {bfl, diffusers}, in detection order.
const std::vector<WeightFormat>& weight_formats();
// detect_format(source, weight_formats()).
DetectedFormat detect_weight_format(const WeightSource& source);

// The sizes the LoRA layout needs, read from BFL-named shapes (mapped_shapes, or a model's
// named_parameters): hidden = img_in.weight rows, mlp_hidden = double_blocks.0.img_mlp.0.weight rows
// (else single_blocks.0.linear1 rows - 3·hidden), block counts from the names. WickError (Data) when
// img_in.weight is absent.
struct LayoutSizes {
  int64_t hidden = 0;
  int64_t mlp_hidden = 0;
  int64_t n_double = 0;
  int64_t n_single = 0;
};
LayoutSizes layout_sizes(const std::map<std::string, Shape>& bfl_shapes);

// Every Linear of Flux with its diffusers/PEFT name(s) (PEFT prefix "transformer."):
//   img_attn.qkv -> attn.to_q, to_k, to_v (hidden rows each); txt_attn.qkv -> attn.add_{q,k,v}_proj;
//   single_blocks.N.linear1 -> attn.to_q, to_k, to_v, proj_mlp (hidden, hidden, hidden, mlp_hidden);
//   final_layer.adaLN_modulation.1 -> norm_out.linear, halves swapped; the rest one to one.
// guidance_in is listed whether or not the model has it.
LoraLayout lora_layout(const LayoutSizes& sizes);

}  // namespace wick::flux
