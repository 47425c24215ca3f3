// SD3 / SD3.5 (Medium and Large) as a registered architecture (`model.arch: sd3`, aliases sd3.5,
// sd35, mmdit, or ai-toolkit's `is_v3: true`): its sizes read from the base weights, which may be
// Stability AI's single file (sd3.5_large.safetensors, sd3.5_medium.safetensors: names under
// "model.diffusion_model."; the VAE and text encoders in the same file are read only for sample images) or a diffusers
// folder (stable-diffusion-3.5-large/ or its transformer/), detected from the keys; its LoRA presets
// and LoRA file naming (PEFT/diffusers by default, kohya as the option).
//
//   auto model = sd3_architecture().build({.model = config.model, .data = geometry, .dtype = DType::BF16,
//                                          .device = Device::cuda(0)});
//
// Keys (model.*): head_dim — the attention head width, which a file without QK norm (SD3 Medium 1.0)
// does not record: 0 (default) = the width of attn.ln_q, else a diffusers folder's config.json
// attention_head_dim, else SAI's 64; vae_path, clip_l_path, clip_g_path, t5_path, clip_tokenizer_path,
// clip_g_tokenizer_path, t5_tokenizer_path, t5_length, sample_shift, keep_encoders_loaded — what sample images
// need (models/sd3/sd3_sampler.h), defaulting to a pipeline folder's parts or the single file's VAE and encoders.
// docs/models.md ("SD3.5 (MMDiT)") describes the model, its weights and its LoRA files.
#pragma once

#include "models/architecture.h"

namespace wick {

const Architecture& sd3_architecture();

}  // namespace wick
