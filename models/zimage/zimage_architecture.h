// Z-Image (Turbo and Base) as a registered architecture (`model.arch: zimage`, or `is_zimage: true`): its sizes read
// from the base weights (the diffusers / authors' transformer/ folder, or ComfyUI's single file with the fused qkv,
// bf16 or fp8), its LoRA presets and file naming (zimage_lora.h), the dataset it trains on (Flux VAE latents, Qwen3
// caption features) and its sampler (zimage_sampler.h).
//
//   auto model = zimage_architecture().build({.model = config.model, .data = geometry, .dtype = DType::BF16,
//                                             .device = Device::cuda(0)});
//
// Keys (model.*): vae_path, text_encoder_path, tokenizer_path — what sample images need, by default from a diffusers
// pipeline folder given as name_or_path; max_length — Qwen3 tokens of a caption (512); sample_shift — the sampling
// schedule's shift (0: the pipeline's scheduler_config.json, else 3.0); keep_encoders_loaded; axes_dims — the RoPE
// widths (empty: config.json beside the weights, else the released [32, 48, 48]). sample.guidance
// defaults to 1 (Turbo: no classifier-free guidance); Base samples with 4 to 5. docs/models.md ("Z-Image").
#pragma once

#include "models/architecture.h"

namespace wick {

const Architecture& zimage_architecture();

}  // namespace wick
