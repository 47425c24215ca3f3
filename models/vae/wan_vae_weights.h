// Wan 2.1 / Qwen-Image VAE weights: the two layouts they come in, the sizes read from them, and
// loading a frozen vae::WanVae.
//
//   auto vae = vae::load_wan_vae("Qwen-Image");                             // pipeline folder: vae/ (config.json)
//   auto same = vae::load_wan_vae("split_files/vae/qwen_image_vae.safetensors");   // ComfyUI's single file
//
// Formats (tried in this order):
//   wan        the original Wan 2.1 names, the model's own (wan_vae_blocks.h): ComfyUI's
//              qwen_image_vae.safetensors, Wan's Wan2.1_VAE.pth converted to safetensors; no prefix,
//              "first_stage_model." or "vae.".
//   diffusers  AutoencoderKLQwenImage / AutoencoderKLWan names: a pipeline's vae/ folder
//              (diffusion_pytorch_model.safetensors and config.json). {encoder, decoder}.conv_in = conv1,
//              encoder.down_blocks.N = encoder.downsamples.N (same flat index) with norm1 / conv1 / norm2 /
//              conv2 / conv_shortcut = residual.0 / 2 / 3 / 6, shortcut; decoder.up_blocks.i.resnets.j =
//              decoder.upsamples.(i·(R + 1) + j) and up_blocks.i.upsamplers.0 = upsamples.(i·(R + 1) + R)
//              (R residual blocks per decoder level); mid_block.{resnets.0, attentions.0, resnets.1} =
//              middle.{0, 1, 2}; norm_out / conv_out = head.0 / head.2; quant_conv / post_quant_conv = conv1 / conv2.
// Sizes come from the shapes (base_dim, dim_mult, residual blocks per level, which resamples have a
// time_conv, z_dim). Normalization: config.json's latents_mean / latents_std, else the option, else Wan
// 2.1's (which Qwen-Image shares) when z_dim is 16. A file in neither layout (an AutoencoderKL, say) is a
// WickError (Config) saying which names were looked for and which were found.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "models/vae/wan_vae.h"
#include "models/weights/key_map.h"

namespace wick::vae {

const WeightFormat& wan_vae_format();
// diffusers' names for a decoder of `n_levels` levels with `decoder_blocks` residual blocks each.
WeightFormat wan_vae_diffusers_format(int64_t n_levels, int64_t decoder_blocks);
// Which layout (and prefix) `source` holds; neither: WickError (Config).
DetectedFormat detect_wan_vae_format(const WeightSource& source);

// Sizes from tensor shapes in the model's (Wan) names, e.g. mapped_shapes(source, format).
// A missing or malformed tensor is a WickError (Data) naming it.
WanVaeConfig wan_vae_config_from_shapes(const std::map<std::string, Shape>& shapes,
                                        const std::string& source_name = "");

struct WanVaeLoadOptions {
  std::optional<WanLatentNormalization> normalization;  // overrides config.json's
  DType dtype = DType::F32;  // parameter and compute dtype (weights cast once when they differ)
  Device device = Device::cpu();
};

struct LoadedWanVae {
  std::shared_ptr<WanVae> model;
  DetectedFormat format;
  std::string source_path;           // the file or index read
  std::string config_json;           // the config.json used, or ""
  std::string normalization_source;  // "options", "config.json", "Wan 2.1's (Qwen-Image's) defaults"
  LoadMappedReport report;
};

// What load_wan_vae(path, options) builds, read from the file headers (and config.json) alone: no tensor is read.
// The same lookup and the same errors as load_wan_vae's.
struct WanVaeHeader {
  WanVaeConfig config;               // sizes and normalization; dtype and device at their defaults
  std::string source_path;           // the file or index it would read
  std::string normalization_source;  // LoadedWanVae::normalization_source
};
WanVaeHeader read_wan_vae_header(const std::string& path, const WanVaeLoadOptions& options = {});

// Opens `path` (a safetensors file, an index, a vae/ folder, or a pipeline folder with a vae/
// subfolder), detects the layout, reads the sizes from the shapes (checked against config.json when
// there is one: a config.json of another class is a WickError (Config)), builds the model and loads
// every parameter strictly (load_mapped: frozen, zero-copy where the file's dtype is `dtype`).
LoadedWanVae load_wan_vae(const std::string& path, const WanVaeLoadOptions& options = {});

}  // namespace wick::vae
