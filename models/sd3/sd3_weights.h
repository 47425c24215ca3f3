// SD3 / SD3.5 MMDiT weights in Stability AI's names (the model's own) and in diffusers'
// SD3Transformer2DModel names, and how the MMDiT's fused layers appear in diffusers/PEFT LoRA files.
//
//   WeightSource source = WeightSource::open("stable-diffusion-3.5-medium", "transformer");  // or the single file
//   DetectedFormat format = sd3::detect_weight_format(source);              // "sai" or "diffusers"
//   std::map<std::string, Shape> shapes = mapped_shapes(source, format);    // SAI names
//   load_mapped(*model, source, format);
//   LoraLayout layout = sd3::lora_layout(sd3::layout_sizes(shapes));        // for to_peft / from_peft
//
// sai: native names, under "model.diffusion_model." in SAI's single files (sd3.5_large.safetensors,
// whose VAE under "first_stage_model." and text encoders, when present, are outside the prefix and not
// read), or ComfyUI's "diffusion_model."; detected by x_embedder.proj.weight and
// joint_blocks.0.x_block.attn.qkv.weight. diffusers: detected by pos_embed.proj.weight and
// transformer_blocks.0.attn.add_q_proj.weight; q, k, v are concatenated by rows into each fused qkv
// (attn, attn2, and the context stream's add_*_proj), and the two (shift, scale) halves are swapped in
// norm_out.linear -> final_layer.adaLN_modulation.1 and in the last block's norm1_context.linear
// (AdaLayerNormContinuous, (scale, shift)) -> its pre-only context_block.adaLN_modulation.1.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "models/weights/key_map.h"
#include "models/weights/lora_format.h"

namespace wick::sd3 {

const WeightFormat& sai_format();
// The diffusers map of a model with `n_blocks` transformer_blocks (the last one is pre-only).
WeightFormat diffusers_format(int64_t n_blocks);
// {sai, diffusers} for this source (its transformer_blocks counted), in detection order.
std::vector<WeightFormat> weight_formats(const WeightSource& source);
// detect_format(source, weight_formats(source)).
DetectedFormat detect_weight_format(const WeightSource& source);

// The sizes the LoRA layout needs, read from SAI-named shapes (mapped_shapes, or a model's
// named_parameters): hidden = x_embedder.proj.weight rows, the block count from the names. WickError
// (Data) when x_embedder.proj.weight is absent.
struct LayoutSizes {
  int64_t hidden = 0;
  int64_t n_blocks = 0;
};
LayoutSizes layout_sizes(const std::map<std::string, Shape>& sai_shapes);

// Every Linear of the MMDiT with its diffusers/PEFT name(s) (PEFT prefix "transformer."):
//   x_block.attn.qkv -> attn.to_q, to_k, to_v (hidden rows each); x_block.attn2.qkv -> attn2.to_q,
//   to_k, to_v; context_block.attn.qkv -> attn.add_q_proj, add_k_proj, add_v_proj;
//   the last block's context_block.adaLN_modulation.1 -> norm1_context.linear and
//   final_layer.adaLN_modulation.1 -> norm_out.linear, halves swapped; the rest one to one
//   (attn.proj -> attn.to_out.0, context attn.proj -> attn.to_add_out, attn2.proj -> attn2.to_out.0,
//   mlp.fc1 / fc2 -> ff.net.0.proj / ff.net.2 and ff_context.*, adaLN_modulation.1 -> norm1.linear /
//   norm1_context.linear, the embedders, final_layer.linear -> proj_out).
// attn2 is listed for every block whether or not the model has it.
LoraLayout lora_layout(const LayoutSizes& sizes);

}  // namespace wick::sd3
