// FLUX.2's VAE behind the ImageVae interface (image_vae.h): the AutoencoderKL of FLUX.1's topology with 32 latent
// channels and both quant convs (vae.h), whose posterior mean is patchified 2 x 2 into 128 channels at 1/16 of the
// image and normalized per channel by the BatchNorm running statistics its file holds (BFL's autoencoder.py,
// diffusers' Flux2Pipeline).
//
//   std::unique_ptr<vae::ImageVae> vae = vae::open_flux2_image_vae("FLUX.2-dev", {.dtype = DType::BF16});
//   const vae::ImageVaeInfo& info = vae->info();    // z 128, downscale 16, channel_mean / channel_std: the BatchNorm's
//   vae::VaeMoments m = vae->encode(images, {});   // [B, 3, H, W] in [-1, 1] -> mean, logvar [B, 128, H/16, W/16]
//   Tensor x0 = vae::normalize_wan_latents(m.mean, {info.channel_mean, info.channel_std});   // = BFL's encode()
//   Tensor pixels = vae->decode_to_images(x0, {});  // BFL's decode(), then (x + 1) / 2 clamped: [B, 3, H, W] in [0, 1]
//
// Latents: mean [B, 32, H/8, W/8] -> [B, 128, H/16, W/16] with channel c·4 + i·2 + j holding mean[c, 2h + i, 2w + j]
// (i the row offset: rearrange "c (h i) (w j) -> (c i j) h w", runtime/ops/layout.h pixel_unshuffle), the logvar
// patchified alike; x0 = (z - running_mean[c]) / sqrt(running_var[c] + eps), eps 1e-4 (BatchNorm2d in eval mode).
// encode returns the patchified moments un-normalized: the normalization is info()'s per-channel lists, which
// `wick dataset encode` records (vae_latents_mean / vae_latents_std) and Objective::scale_latents applies.
#pragma once

#include <memory>
#include <string>

#include "models/vae/image_vae.h"
#include "models/vae/vae_config.h"

namespace wick::vae {

// The FLUX.2 VAE at `path` (load_vae's paths: BFL's ae.safetensors of FLUX.2-dev, ComfyUI's flux2-vae.safetensors,
// a diffusers vae/ folder with config.json's _class_name AutoencoderKLFlux2, or a pipeline folder holding one), its
// sizes from the headers and its BatchNorm statistics read (read_latent_batch_norm); nothing else is read before the
// first encode or decode. info(): z_channels = patch² · z (128), downscale = 8 · patch (16), channel_mean =
// running_mean, channel_std = sqrt(running_var + eps), scaling and shift as load_vae resolves them (1 and 0 unless
// options.normalization or config.json says otherwise), tiling true (encode tiles the image through
// AutoencoderKL::encode, tile sizes multiples of 8, then patchifies the whole mean). encode: the patchified mean and
// logvar (logvar clamped to [-30, 20] before the patchify) in the options' dtype and device. decode_to_images:
// x·std_c + mean_c, then the dataset's scalar factors undone, unpatchified, post_quant_conv and the decoder.
// WickError (Data) for a VAE without a latent BatchNorm (FLUX.1's ae.safetensors) or a file that does not load,
// naming the file and the tensors; (Config) for a group count that does not divide the channels.
std::unique_ptr<ImageVae> open_flux2_image_vae(const std::string& path, const ImageVaeOptions& options);

// The real FLUX.2 VAE's sizes: ldm_vae_config(32, true) (FLUX.1's levels, both quant convs) with latent_patch 2 (its
// BatchNorm over 128 channels): 84,046,115 weights and 256 statistics in 250 tensors, as diffusers'
// AutoencoderKLFlux2() defaults.
VaeConfig flux2_vae_config();

}  // namespace wick::vae
