// Qwen-Image's denoising loop as diffusers' QwenImagePipeline runs it: text rows (llm::qwen_image_prompt_embeds) and
// starting noise -> Euler over the pipeline's schedule (MODELS2 section 2.2, trap 17), with "true CFG" when a negative
// prompt is given -> latents -> the Qwen-Image VAE (WanVae) -> images in [0, 1]. What Qwen-Image's sample grids and
// `wick sample` will wrap; diffusers' pipeline gives the same latents and images (tests/data/qwenimage_sample).
//
//   Tensor noise = qwenimage_noise(0, 2, 1024, 1024, /*seed=*/7, device);             // f32 [2, 16, 128, 128]
//   QwenImageText text{.prompts = {.context = q.embeds, .context_mask = q.mask},     // [2, L, 3584], [2, L]
//                      .negative = {.context = neg.embeds, .context_mask = neg.mask}};   // [1 or 2, Ln, 3584]
//   Tensor latents = qwenimage_denoise(*model, text, noise, {.steps = 50, .true_cfg_scale = 4.0});
//   Tensor images = qwenimage_decode(*vae.model, latents);                            // f32 [2, 3, 1024, 1024]
//
// Schedule: σ = linspace(1, 1/N, N) (float64, then float32), the scheduler's exponential time shift
// e^mu / (e^mu + 1/σ − 1) with mu = calculate_shift(image tokens) over (256, 0.5) .. (8192, 0.9), stretched so that the
// last σ is shift_terminal 0.02 (1 − σ'' = (1 − σ')·0.98 / (1 − σ'_last)), then 0; all in float32 as numpy computes it.
// The transformer sees (1000 σ) / 1000 (QwenImageTransformer::predict), the step is x ← x + (σ_next − σ)·v.
// True CFG (true_cfg_scale > 1 and negative rows given): comb = neg + s·(pos − neg), then rescaled per token so its
// norm over the token's 64 packed features (16 channels x 2 x 2) is the positive prediction's; two forwards per step.
#pragma once

#include <cstdint>
#include <vector>

#include "models/diffusion/denoiser.h"
#include "models/qwenimage/qwenimage.h"
#include "models/vae/wan_vae.h"

namespace wick::qwenimage {

// The scheduler config of Qwen-Image (scheduler/scheduler_config.json: use_dynamic_shifting, time_shift_type
// exponential); diffusers' generic defaults (4096, 1.15) are not Qwen-Image's.
struct QwenImageSchedule {
  int64_t base_image_seq_len = 256;
  int64_t max_image_seq_len = 8192;
  double base_shift = 0.5;
  double max_shift = 0.9;
  double shift_terminal = 0.02;  // the last σ before 0 (0 = no stretch)
};

// calculate_shift: the line through (base_image_seq_len, base_shift) and (max_image_seq_len, max_shift) at
// `image_tokens` (not clamped), in float64. 1024 x 1024 (4096 tokens): 0.6935.
double qwenimage_mu(int64_t image_tokens, const QwenImageSchedule& schedule = {});

// The pipeline's steps + 1 σ values for `image_tokens` packed tokens ((H/16)·(W/16) for an H x W image), descending
// from 1 to shift_terminal, then 0; float32 values. One step gives {1, 0} (diffusers divides 0 by 0 there and samples
// from NaN). Config error for steps < 1, image_tokens < 1 or a schedule that is not one.
std::vector<double> qwenimage_sigmas(int64_t steps, int64_t image_tokens, const QwenImageSchedule& schedule = {});

struct QwenImageSampling {
  int64_t steps = 50;           // num_inference_steps (the pipeline's default)
  double true_cfg_scale = 4.0;  // > 1 with negative rows: true CFG; otherwise one forward per step
  QwenImageSchedule schedule;
};

// The text a batch is denoised with.
struct QwenImageText {
  // context [B, L, text_dim] (any floating dtype and device), context_mask [B, L] (nonzero = a text token; undefined
  // = every token): the prompts' rows, padded to the longest.
  diffusion::Conditioning prompts;
  // The negative prompt's rows [B or 1, Ln, text_dim] and mask [B or 1, Ln] (one row is used for every sample);
  // context undefined = no negative prompt (then no CFG whatever true_cfg_scale says, as the pipeline).
  diffusion::Conditioning negative;
};

// The starting noise of images first .. first + n − 1 of a call at height x width pixels (multiples of 16): f32
// [n, 16, height / 8, width / 8] on `device`, image i from derive_stream(seed, i, 0, Noise) (models/diffusion/
// generate.h sample_noise), the same image whatever the batch. Config error for other sizes.
Tensor qwenimage_noise(int64_t first, int64_t n, int64_t height, int64_t width, uint64_t seed, Device device);

// noise f32 [B, out_channels, h, w] (h, w multiples of the patch size; any device) -> the final latents f32 [B,
// out_channels, h, w] on the CPU (normalized: what the transformer works in). Runs `model` on its device in its dtype,
// in evaluation mode, without a graph; the whole batch in one forward (two with CFG). Errors: Config for settings out
// of range, WickError naming the tensor whose shape does not fit.
Tensor qwenimage_denoise(QwenImageTransformer& model, const QwenImageText& text, const Tensor& noise,
                         const QwenImageSampling& settings);

// latents [B, z_dim, h, w] (normalized, any floating dtype and device) -> images f32 [B, 3, 8h, 8w] on the CPU in
// [0, 1]: the pipeline's denormalization latents·std_c + mean_c (the VAE's config), the VAE decoder (on its device, in
// its dtype, one image at a time), then (x + 1) / 2 clamped to [0, 1].
Tensor qwenimage_decode(vae::WanVae& vae, const Tensor& latents);

}  // namespace wick::qwenimage
