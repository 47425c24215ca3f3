// The SDXL UNet as a registered architecture (`model.arch: sdxl`, aliases sdxl_base, sd_xl, stable-diffusion-xl, or
// ai-toolkit's `is_sdxl: true` / `is_xl: true`): its sizes read from the base weights, which may be the single-file
// checkpoint (sd_xl_base_1.0.safetensors: the UNet under "model.diffusion_model.", the VAE and both text encoders in
// the same file left unread), a bare LDM-named UNet file, or a diffusers folder (stable-diffusion-xl-base-1.0/ or its
// unet/), detected from the keys; DDPM training by default; its LoRA presets, LoCon targets (network.conv) and kohya
// LoRA files (lora_unet_<LDM path>), which ComfyUI and diffusers both load; a full fine-tune exported in the layout the
// base came in.
//
//   auto unet = sdxl_architecture().build({.model = config.model, .data = geometry, .dtype = DType::BF16,
//                                          .device = Device::cuda(0)});
//
// Keys (model.*), the facts no weight shape holds; 0 (default) = a diffusers folder's config.json, else SDXL's:
// head_dim (64), num_heads (a fixed head count instead, SD 1.x's 8), norm_groups (32), addition_time_embed_dim (256);
// and what sample images need (models/sdxl/sdxl_sampler.h): vae_path, clip_l_path, clip_g_path, clip_tokenizer_path,
// clip_g_tokenizer_path ("" = the pipeline folder's or the single file's part), keep_encoders_loaded.
// docs/models.md ("SDXL") describes the model, its weights and its LoRA files.
#pragma once

#include "models/architecture.h"

namespace wick {

const Architecture& sdxl_architecture();

}  // namespace wick
