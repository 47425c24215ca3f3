// Qwen-Image's LoRA targets and file naming, what its Architecture (models/architecture.h) returns.
//
//   nn::apply_adapters(*model, {.patterns = qwenimage::lora_target_presets().at(qwenimage::kDefaultLoraPreset)});
//   save_lora(*model, qwenimage::lora_naming(), config, "run.safetensors", step, hash);   // models/lora_files.h
//   load_lora(*other, qwenimage::lora_naming(), "run.safetensors");                       // kohya or PEFT
//
// The model's module paths are diffusers' names, which ComfyUI's files use too, so both namings are the plain ones
// and ComfyUI loads either without renaming (MODELS2 section 2.6): kohya as musubi-tuner writes it,
// lora_unet_transformer_blocks_0_attn_to_q.lora_down.weight / .lora_up.weight / .alpha; PEFT as
// QwenImagePipeline.load_lora_weights takes it, transformer.transformer_blocks.0.attn.to_q.lora_A.weight / .lora_B.
// No layer is fused, so no PEFT layout is needed.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "models/architecture.h"

namespace wick::qwenimage {

// "all": every Linear of the transformer blocks, the modulation layers img_mod.1 and txt_mod.1 included (what
// musubi-tuner's exclude pattern actually leaves in, and ai-toolkit's transformer_only choice: 14 per block);
// "no_modulation": the same without img_mod.1 and txt_mod.1 (12 per block); "attention": the image stream's to_q,
// to_k, to_v, to_out.0 (diffusers' example script); "attention_joint": those and the text stream's add_q_proj,
// add_k_proj, add_v_proj, to_add_out.
std::map<std::string, std::vector<std::string>> lora_target_presets();
inline constexpr const char* kDefaultLoraPreset = "all";

// The metadata of Qwen-Image's LoRA files (ss_base_model_version, modelspec.architecture); no PEFT layout.
LoraNaming lora_naming();

}  // namespace wick::qwenimage
