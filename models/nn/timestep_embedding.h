// The sinusoidal timestep features of Flux, SD3 and the SDXL UNet (BFL's timestep_embedding, SAI's
// TimestepEmbedder and sgm's timestep_embedding, diffusers' Timesteps(dim, flip_sin_to_cos=True,
// downscale_freq_shift=0)), computed as torch computes them on the CPU, so that f32 parity with the
// reference holds to a few ulps.
//
//   Tensor features = nn::timestep_features(sigmas, 1000.0, DType::BF16);          // [B] -> [B, 256]
//   Tensor unet = nn::timestep_features(timesteps, 1.0, DType::F32, 320);        // SDXL's time_embed input
//
// The model's time convention decides `scale`: Flux and SD3 take σ in [0, 1] and embed σ · 1000.
#pragma once

#include "runtime/tensor.h"

namespace wick::nn {

// values F32/F64/BF16/F16 [B] (any device, not differentiated) -> [B, 256] in `dtype`:
// [cos(scale · v · f_i), sin(scale · v · f_i)], f_i = 10000^(-i / 128), with scale · v computed in f32.
Tensor timestep_features(const Tensor& values, double scale, DType dtype);
// The same with `dim` (even) features: [cos(scale · v · f_i), sin(scale · v · f_i)], f_i = 10000^(-i / (dim / 2)).
Tensor timestep_features(const Tensor& values, double scale, DType dtype, int64_t dim);

// timestep_features' order (scale · v rounded first) with the correctly rounded frequencies (FLUX.2): what
// torch computes where its f32 exp rounds correctly, rather than one machine's rounding (see below).
Tensor timestep_features_exact(const Tensor& values, double scale, DType dtype, int64_t dim = 256);

// diffusers' get_timestep_embedding order (Qwen-Image's Timesteps(256, flip_sin_to_cos=True,
// downscale_freq_shift=0, scale=1000)): [cos((v · f_i) · scale), sin((v · f_i) · scale)], the product
// v · f_i rounded to f32 before the scale is applied (timestep_features rounds scale · v first; with
// angles of hundreds of radians the two orders differ by an ulp of the angle, ~6e-5). The frequencies
// are the correctly rounded ones, not timestep_features' copy of one machine's SLEEF rounding: torch's
// f32 exp differs between CPUs (the machine that made tests/data/qwenimage rounds entries 12 and 106
// off, moving the tiny Qwen-Image's output by 5e-7; the entries 13, 44, 119 of timestep_features would
// move it by 1.6e-5).
Tensor timestep_features_scaled_after(const Tensor& values, double scale, DType dtype, int64_t dim = 256);

}  // namespace wick::nn
