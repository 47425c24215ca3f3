// FLUX.2's LoRA targets and file naming, what its Architecture (models/architecture.h) returns.
//
//   nn::apply_adapters(*model, {.patterns = flux2::lora_target_presets().at(flux2::kDefaultLoraPreset)});
//   save_lora(*model, flux2::lora_naming(*model), config, "run.safetensors", step, hash);   // models/lora_files.h
//
// The model's module paths are BFL's names (fused img_attn.qkv, linear1), which ComfyUI, ai-toolkit and
// diffusion-pipe use; kohya naming is musubi-tuner's lora_unet_double_blocks_0_img_attn_qkv.*; PEFT naming splits
// the fused q/k/v into diffusers' to_q / to_k / to_v (flux2_weights.h lora_layout), as Flux2Pipeline.load_lora_weights
// takes it.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "models/architecture.h"

namespace wick::flux2 {

// "all": every Linear of the double and single blocks (8 per double block: img/txt qkv, proj, mlp.0, mlp.2; 2 per
// single block: linear1, linear2 — musubi-tuner's, diffusion-pipe's and ai-toolkit's choice; FLUX.2's modulations are
// outside the blocks); "attention": the attention projections and the single blocks' fused layers (img/txt qkv and
// proj, linear1, linear2); "image_attention": the image stream's qkv and proj and the single blocks' linear1
// (SimpleTuner's default targets in BFL names).
std::map<std::string, std::vector<std::string>> lora_target_presets();
inline constexpr const char* kDefaultLoraPreset = "all";

class Flux2Transformer;
// The metadata of a model's LoRA files (modelspec.architecture by variant: Flux.2-dev, Flux.2-klein-4b,
// Flux.2-klein-9b, as musubi-tuner writes it) and the PEFT layout of its fused layers.
LoraNaming lora_naming(const Flux2Transformer& model);

}  // namespace wick::flux2
