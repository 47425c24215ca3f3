// LoRA / DoRA files: the adapters of a model written in the naming other tools load, and read back.
//
//   save_lora(*model, config, "output/run/lora/run.safetensors", step, base_hash);
//   load_lora(*other, "output/run/lora/run.safetensors");       // onto a model with the same adapters
//
// kohya (save.format kohya, the default; what ComfyUI loads): <name>.lora_down.weight [r, in],
// <name>.lora_up.weight [out, r], <name>.alpha (0-d), DoRA <name>.dora_scale [1, in], with
// <name> = the architecture's kohya prefix + the module path with '.' -> '_'
// ("lora_unet_double_blocks_0_img_attn_qkv"). Metadata: ss_network_dim, ss_network_alpha,
// ss_network_module, ss_base_model_hash, ss_steps, the architecture's ss_* / modelspec.* entries,
// wick_network_type and wick_config (the resolved YAML).
#pragma once

#include <cstdint>
#include <string>

#include "engine/config/train_config.h"
#include "models/architecture.h"

namespace wick {

// The kohya name of a module path: "blocks.0.attn.q" -> "lora_unet_blocks_0_attn_q" (prefix
// "lora_unet_" unless given).
std::string kohya_lora_name(const std::string& module_path, const std::string& prefix = "lora_unet_");

// Writes the adapters of `model` (tensors in config.save.dtype, naming config.save.format) through a
// temporary file and a rename. A model without adapters is a Usage error.
void save_lora(const DiffusionModel& model, const TrainConfig& config, const std::string& path, int64_t step,
               const std::string& base_model_hash);

// Loads a file written by save_lora (or kohya-style with the same module names) into the adapters of
// `model`. Every adapter must find its tensors with the same rank, alpha and kind (LoRA / DoRA), and
// every lora tensor of the file must belong to an adapter; otherwise a Data error naming the file and
// the key.
void load_lora(DiffusionModel& model, const std::string& path);

}  // namespace wick
