// VAE weights: the files and names they come in, the sizes read from them, the latent normalization,
// and loading a frozen vae::AutoencoderKL from any of them.
//
//   auto sdxl = vae::load_vae("stable-diffusion-xl-base-1.0");           // pipeline folder: vae/ (config.json)
//   auto flux = vae::load_vae("FLUX.1-dev/ae.safetensors",                // BFL's names, no config.json:
//                             {.normalization = {{0.3611, 0.1159}, "flux"}, .dtype = DType::BF16});   // the model's
//   vae::VaeHeader h = vae::read_vae_header("FLUX.1-dev/ae.safetensors");   // sizes only, no tensor read
//   vae::LatentBatchNorm bn = vae::read_latent_batch_norm("flux2-vae.safetensors");  // FLUX.2's two statistics
//
// Formats (tried in this order):
//   ldm        LDM / sgm / BFL names (vae_blocks.h): Flux's ae.safetensors and standalone LDM VAE files
//              (no prefix), SDXL / SD3.5 single files (prefix "first_stage_model."), "vae." (some
//              trainers). The attention q / k / v / proj_out may be 1x1 convs [C, C, 1, 1] or [C, C].
//              FLUX.2's (BFL's ae.safetensors, ComfyUI's flux2-vae.safetensors) hold the quant convs
//              as encoder.quant_conv / decoder.post_quant_conv.
//   diffusers  AutoencoderKL's names: a pipeline's vae/ folder (diffusion_pytorch_model.safetensors
//              and config.json). encoder.down_blocks.i.resnets.j.{..., conv_shortcut},
//              encoder.down_blocks.i.downsamplers.0.conv, {encoder, decoder}.mid_block.{resnets.0 / 1,
//              attentions.0.{group_norm, to_q, to_k, to_v, to_out.0} (Linear [C, C])}, conv_norm_out,
//              decoder.up_blocks.i = LDM decoder.up.(n - 1 - i) (index reversed), upsamplers.0.conv;
//              config.json's _class_name AutoencoderKL or AutoencoderKLFlux2 (FLUX.2's vae/).
// FLUX.2's latent BatchNorm statistics bn.running_mean / bn.running_var keep their names in both formats
// (bn.num_batches_tracked is ignored).
// Sizes come from the shapes: levels and their channels, ResBlocks per level (encoder and decoder),
// z channels, whether quant_conv / post_quant_conv / mid attention exist, and the latent BatchNorm's
// patch (its statistics' length = patch² · z channels). The GroupNorm group count is
// not in the weights: config.json's norm_num_groups, else 32 (every real VAE), else the option.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/vae/vae.h"
#include "models/weights/key_map.h"

namespace wick::vae {

// The LDM format (prefixes "", "first_stage_model.", "vae.").
const WeightFormat& ldm_format();
// The diffusers format for a VAE of n_levels levels (the decoder's index reversal depends on it).
WeightFormat diffusers_format(int64_t n_levels);
// Which format (and prefix) `source` holds, with the diffusers rules sized by its level count.
// Neither: WickError (Data) listing what was looked for and some of the source's names.
DetectedFormat detect_vae_format(const WeightSource& source);

// Sizes from tensor shapes in the model's (LDM) names, e.g. mapped_shapes(source, format); the
// group count and normalization keep the defaults. A missing or malformed tensor is a WickError
// (Data) naming it; `source_name` (a path) goes into the messages.
VaeConfig config_from_shapes(const std::map<std::string, Shape>& shapes, const std::string& source_name = "");

// What a diffusers AutoencoderKL or AutoencoderKLFlux2 config.json says (fields it lacks stay unset).
struct HfVaeConfig {
  std::string path;
  std::string class_name;                // "_class_name"
  std::optional<double> scaling_factor;  // "scaling_factor"; AutoencoderKLFlux2 without one: 1
  double shift_factor = 0.0;             // "shift_factor"; null or absent: 0 (diffusers: no shift)
  std::optional<int64_t> norm_num_groups, latent_channels, layers_per_block, in_channels, out_channels;
  std::optional<std::vector<int64_t>> block_out_channels;
  std::optional<bool> use_quant_conv, use_post_quant_conv, mid_block_add_attention;
  // AutoencoderKLFlux2's: the latent BatchNorm's eps and patch, and a decoder's own channels (wick: the encoder's).
  std::optional<double> batch_norm_eps;
  std::optional<std::vector<int64_t>> patch_size, decoder_block_out_channels;
};
// The config.json beside the weights of `source` when its _class_name is AutoencoderKL or AutoencoderKLFlux2, else
// nothing.
// WickError (Data) when it is not JSON or a field has the wrong type.
std::optional<HfVaeConfig> read_hf_config(const WeightSource& source);

// The latent normalization of the model a VAE is loaded for (its architecture's DatasetSpec::normalization), and
// whose it is ("flux"), for LoadedVae::normalization_source.
struct ModelNormalization {
  LatentNormalization normalization;
  std::string model;
};

struct VaeLoadOptions {
  // The normalization where the file has no config.json (see load_vae): an LDM file (ae.safetensors, a single
  // file) does not say which model's latents it makes.
  std::optional<ModelNormalization> normalization;
  std::optional<double> scaling_factor, shift_factor;  // override everything else
  int64_t norm_groups = 0;                             // 0: config.json's norm_num_groups, else 32
  DType dtype = DType::F32;  // parameter and compute dtype (weights cast once when they differ)
  Device device = Device::cpu();
  int64_t attention_query_chunk = 0;  // VaeConfig::attention_query_chunk
};

struct LoadedVae {
  std::shared_ptr<AutoencoderKL> model;
  DetectedFormat format;
  std::string source_path;  // the file or index read
  std::string config_json;  // the config.json used, or ""
  // Where scaling / shift came from: "options", "config.json", "the flux model's"; the two may differ when
  // only one was given.
  std::string normalization_source;
  LoadMappedReport report;
};

// The sizes load_vae(path, {.norm_groups = norm_groups}) builds (levels, channels, z channels, downscale
// factor, group count), read from the file headers (and config.json) alone: no tensor is read. The same
// lookup and the same errors as load_vae's, a group count that does not divide the channels included.
struct VaeHeader {
  VaeConfig config;                  // sizes and group count; normalization, dtype and device at their defaults
  std::string source_path;           // the file or index it would read
  std::string normalization_source;  // with options only: LoadedVae::normalization_source ("" otherwise)
};
VaeHeader read_vae_header(const std::string& path, int64_t norm_groups = 0);
// The same with options.norm_groups, and config.normalization resolved as load_vae(path, options) resolves it, with
// the same Config error when nothing gives it: what load_vae will build, the dtype and device aside.
VaeHeader read_vae_header(const std::string& path, const VaeLoadOptions& options);

// Opens `path` (a safetensors file, an index, a vae/ folder, or a pipeline folder: its vae/ subfolder
// when it has one, whatever other files it holds, as a Hugging Face snapshot of FLUX.1-dev holds
// ae.safetensors and flux1-dev.safetensors beside vae/),
// detects the format, reads the sizes from the shapes (checked against config.json when one is used),
// builds the model and loads every parameter strictly (load_mapped: frozen, zero-copy where the file's
// dtype is `dtype`). Normalization, each of scaling and shift: the option, else config.json, else the
// model's (options.normalization), else, for a VAE with a latent BatchNorm (FLUX.2's), none (scale 1,
// shift 0); none of them: WickError (Config) asking for the factors. Errors are WickError (Data)
// naming the file and up to ten tensors, or (Config) for options.
LoadedVae load_vae(const std::string& path, const VaeLoadOptions& options = {});

// FLUX.2's latent BatchNorm as a file holds it (VaeConfig::latent_patch, batch_norm_eps): its latents are the
// posterior mean patchified patch x patch and then (x - running_mean[c]) / sqrt(running_var[c] + eps).
struct LatentBatchNorm {
  int64_t patch = 0;
  double eps = 1e-4;
  std::vector<double> running_mean, running_var;  // patch² · z_channels values each, as stored (any float dtype)
};
// The latent BatchNorm of the VAE at `path` (load_vae's paths and formats): sizes from the headers (and config.json's
// batch_norm_eps), then the two statistics read (a few hundred bytes). WickError (Data) naming the file when the VAE
// has none (not FLUX.2's), when only one of the two tensors is there (naming the missing one), or naming the tensor
// when a value is not finite or a variance plus eps is not positive.
LatentBatchNorm read_latent_batch_norm(const std::string& path);

}  // namespace wick::vae
