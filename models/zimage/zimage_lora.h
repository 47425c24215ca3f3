// Z-Image's LoRA targets and file naming, what its Architecture (models/architecture.h) returns.
//
//   nn::apply_adapters(*model, {.patterns = zimage::lora_target_presets().at(zimage::kDefaultLoraPreset)});
//   save_lora(*model, zimage::lora_naming(), config, "run.safetensors", step, hash);   // models/lora_files.h
//   load_lora(*other, zimage::lora_naming(), "run.safetensors");                       // kohya or PEFT
//
// The model's module paths are diffusers' (and the authors') names, so both namings are the plain ones:
// kohya as musubi-tuner writes it, lora_unet_layers_0_attention_to_q.lora_down.weight / .lora_up.weight / .alpha;
// PEFT as ZImagePipeline.load_lora_weights takes it, transformer.layers.0.attention.to_q.lora_A.weight / .lora_B.
// No layer is fused (to_q, to_k, to_v are separate Linears), so no PEFT layout is needed.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "models/architecture.h"

namespace wick::zimage {

// "all": every Linear of the main layers (musubi-tuner's and ai-toolkit's choice); "attention": their to_q, to_k,
// to_v, to_out.0; "attention_mlp": those and the SwiGLU's w1, w2, w3; "attention_refiners" and "all_refiners": the
// same in the noise and context refiners too (diffusers' example trains the attention of every block).
std::map<std::string, std::vector<std::string>> lora_target_presets();
inline constexpr const char* kDefaultLoraPreset = "all";

// The metadata of Z-Image's LoRA files (ss_base_model_version, modelspec.architecture); no PEFT layout.
LoraNaming lora_naming();

}  // namespace wick::zimage
