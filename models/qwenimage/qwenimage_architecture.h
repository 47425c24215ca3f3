// Qwen-Image (and Qwen-Image-Edit's transformers) as a registered architecture (`model.arch: qwenimage`, or
// `is_qwen_image: true`): its sizes read from the base weights (the diffusers transformer/ folder, or ComfyUI's single
// file), its LoRA presets and file naming (qwenimage_lora.h), the dataset it trains on (the Qwen-Image VAE's latents,
// normalized per channel, with Qwen2.5-VL's caption rows) and its sampler (qwenimage_sampler.h).
//
//   auto model = qwenimage_architecture().build({.model = config.model, .data = geometry, .dtype = DType::BF16,
//                                                .device = Device::cuda(0)});
//
// Keys (model.*): vae_path, text_encoder_path, tokenizer_path — what sample images need, by default from a diffusers
// pipeline folder given as name_or_path; max_length — caption rows kept (512, the pipeline's max_sequence_length);
// keep_encoders_loaded. sample.guidance is the pipeline's true_cfg_scale (4 by default; 1 = one forward per step).
// docs/models.md ("Qwen-Image").
#pragma once

#include "models/architecture.h"

namespace wick {

const Architecture& qwenimage_architecture();

}  // namespace wick
