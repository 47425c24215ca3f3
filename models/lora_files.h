// LoRA / DoRA files: the adapters of a model written in the naming other tools load, and read back.
//
//   save_lora(*model, config, "output/run/lora/run.safetensors", step, base_hash);   // save.format
//   load_lora(*other, "output/run/lora/run.safetensors");   // kohya or PEFT, onto matching adapters
//
// kohya (save.format kohya, the default; what ComfyUI and kohya's tools load): per module path,
// lora_unet_<path with '.' -> '_'>.lora_down.weight [r, in] ([r, in, kh, kw] on a convolution),
// .lora_up.weight [out, r] ([out, r, 1, 1]), .alpha (0-d), DoRA .dora_scale [1, in].
// PEFT (save.format peft; what diffusers' load_lora_weights takes): transformer.<diffusers module>
// .lora_A.weight / .lora_B.weight with alpha / r baked into lora_B, fused layers split into their
// diffusers parts by the architecture's layout (Flux: img_attn.qkv -> attn.to_q, to_k, to_v), DoRA
// .lora_magnitude_vector [out]; metadata lora_adapter_metadata (r, lora_alpha = r, use_dora, ...).
// Both: ss_network_dim, ss_network_alpha, ss_network_module, ss_base_model_hash, ss_steps,
// ss_output_name, modelspec.* and the architecture's entries, wick_network_type, wick_config.
#pragma once

#include <cstdint>
#include <string>

#include "engine/config/train_config.h"
#include "models/architecture.h"
#include "models/nn/adapter.h"

namespace wick {

// The DoRA magnitude orientation a file format carries: kohya's dora_scale [1, in] (input), PEFT's
// lora_magnitude_vector [out] (output). A DoRA run trains the orientation of its save.format.
nn::DoraAxis dora_axis_for(LoraFormat format);

// Writes the adapters of `model` (tensors in config.save.dtype, naming config.save.format) through a
// temporary file and a rename. A model without adapters, or a DoRA whose orientation the format
// cannot carry, is a Usage error.
void save_lora(const Module& model, const TrainConfig& config, const std::string& path, int64_t step,
               const std::string& base_model_hash);

// Loads a kohya or PEFT file (detected from its keys) into the adapters of `model`. Every adapter
// must find its tensors with the same rank and kind (LoRA / DoRA of the file's orientation); kohya
// alphas must equal the adapters' (PEFT files carry the scale baked in, which is divided out again);
// every tensor of the file must belong to an adapter. Otherwise a Data error naming the file and
// the key. `model` may be any Module; its PEFT layout is the architecture's when it is a
// DiffusionModel, else one PEFT module per adapter path.
void load_lora(Module& model, const std::string& path);

// The same with the naming given (an architecture's LoraNaming for a model that is not looked up in the registry).
void save_lora(const Module& model, const LoraNaming& naming, const TrainConfig& config, const std::string& path,
               int64_t step, const std::string& base_model_hash);
void load_lora(Module& model, const LoraNaming& naming, const std::string& path);

}  // namespace wick
