// Flux.1 as a registered architecture (`model.arch: flux`, or ai-toolkit's `is_flux: true`): its
// sizes and variant (dev with guidance, schnell without) read from the base weights, which may be
// Black Forest Labs' single file (flux1-dev.safetensors, also under ComfyUI's
// "model.diffusion_model." prefix) or a diffusers folder (FLUX.1-dev/ or its transformer/), detected
// from the keys; its LoRA presets and LoRA file naming (kohya or PEFT).
//
//   auto model = flux_architecture().build({.model = config.model, .data = geometry, .dtype = DType::BF16,
//                                           .device = Device::cuda(0)});
//
// Keys (model.*): guidance — the guidance input of a dev model during training (default 1.0);
// axes_dim — the RoPE widths per position axis (no tensor gives them): empty (default) = the
// axes_dims_rope of a diffusers folder's config.json, else Flux.1's [16, 56, 56]; vae_path, clip_l_path,
// t5_path, clip_tokenizer_path, t5_tokenizer_path, t5_length, keep_encoders_loaded — what sample images
// need (models/flux/flux_sampler.h), by default from a diffusers pipeline folder given as name_or_path.
// sample.width / sample.height choose the sample size; sample.guidance defaults to 3.5 (dev's input).
// docs/models.md ("Flux.1") describes the model, its weights and its LoRA files.
#pragma once

#include "models/architecture.h"

namespace wick {

const Architecture& flux_architecture();

}  // namespace wick
