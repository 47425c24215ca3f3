// SDXL UNet weights in LDM/sgm names (the model's own: sd_xl_base_1.0.safetensors under "model.diffusion_model.") and
// in diffusers' UNet2DConditionModel names (a unet/ folder), both ways; and how the UNet's modules appear in diffusers'
// LoRA naming.
//
//   WeightSource source = WeightSource::open("stable-diffusion-xl-base-1.0", "unet");   // or the single file
//   DetectedFormat format = sdxl::detect_weight_format(source);       // "ldm" or "diffusers"
//   UnetConfig c = config_from_shapes(mapped_shapes(source, format), sdxl::diffusers_config_hints(source));
//   load_mapped(*unet, source, format);
//   std::string d = sdxl::ldm_to_diffusers("input_blocks.4.1.proj_in.weight", sdxl::module_renames(layout_of(c)));
//   // "down_blocks.1.attentions.0.proj_in.weight"
//   sdxl::export_unet(*unet, "out/model", "run", DType::F16, metadata);   // the layout the weights came from
//
// ldm: native names, bare, under "model.diffusion_model." (a full checkpoint, whose VAE under "first_stage_model." and
// text encoders under "conditioner." are outside the prefix and not read) or ComfyUI's "diffusion_model."; detected by
// input_blocks.0.0.weight and out.2.weight. diffusers: detected by conv_in.weight and
// down_blocks.0.resnets.0.conv1.weight; every tensor renamed by the index arithmetic of sgm's UNetModel (no tensor is
// reshaped: the projections have the same kind in both):
//   input_blocks.0.0 = conv_in; input_blocks.(1 + l·(R+1) + j).0 / .1 = down_blocks.l.resnets.j / attentions.j;
//   input_blocks.(1 + l·(R+1) + R).0.op = down_blocks.l.downsamplers.0.conv; middle_block.0 / 1 / 2 =
//   mid_block.resnets.0 / attentions.0 / resnets.1; output_blocks.(u·(R+1) + j).0 / .1 = up_blocks.u.resnets.j /
//   attentions.j (u = L - 1 - l); its upsampler (j = R, l > 0) .2.conv after a transformer, .1.conv without =
//   up_blocks.u.upsamplers.0.conv; out.0 / out.2 = conv_norm_out / conv_out; time_embed.0 / 2 =
//   time_embedding.linear_1 / 2; label_emb.0.0 / 0.2 = add_embedding.linear_1 / 2; inside a resnet in_layers.0 = norm1,
//   in_layers.2 = conv1, emb_layers.1 = time_emb_proj, out_layers.0 = norm2, out_layers.3 = conv2, skip_connection =
//   conv_shortcut; inside a transformer the names are the same.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "models/sdxl/sdxl_config.h"
#include "models/sdxl/sdxl_unet.h"
#include "models/weights/key_map.h"
#include "models/weights/lora_format.h"

namespace wick::sdxl {

// The block structure the renames depend on.
struct UnetLayout {
  int64_t n_levels = 3;
  int64_t num_res_blocks = 2;
  std::vector<bool> attention = {false, true, true};  // per level
};
UnetLayout layout_of(const UnetConfig& config);

// One block (or top-level layer) in both namings; `resnet`: its children are renamed too (in_layers.0 = norm1, ...).
struct ModuleRename {
  std::string ldm;
  std::string diffusers;
  bool resnet = false;
};
std::vector<ModuleRename> module_renames(const UnetLayout& layout);

// A parameter or module path in one naming -> the other; "" when the path is in no block of the layout (or is a
// resnet child with no counterpart).
std::string ldm_to_diffusers(const std::string& ldm_path, const std::vector<ModuleRename>& renames);
std::string diffusers_to_ldm(const std::string& diffusers_path, const std::vector<ModuleRename>& renames);

const WeightFormat& ldm_format();
// The diffusers map of the blocks `source`'s diffusers names have (levels, resnets per level, attention per level).
WeightFormat diffusers_format(const WeightSource& source);
// {ldm, diffusers} for this source, in detection order; detect_format(source, weight_formats(source)).
std::vector<WeightFormat> weight_formats(const WeightSource& source);
DetectedFormat detect_weight_format(const WeightSource& source);

// What a diffusers config.json beside the weights says that no shape does: the head width or count (diffusers'
// attention_head_dim is the per-level head COUNT unless num_attention_heads is set), norm_num_groups and
// addition_time_embed_dim (0 where it says nothing, or there is no config.json). WickError (Data) for a config.json
// that is not JSON.
ConfigHints diffusers_config_hints(const WeightSource& source);

// The UNet's Linear layers in diffusers' PEFT naming ("unet." + the diffusers module), for save.format peft.
LoraLayout lora_layout(const UnetConfig& config);

// Writes a trained UNet (a full fine-tune) in `dtype` the way its weights were read (unet.weight_origin()):
//   ldm (or no origin): <directory>/<name>.safetensors with the LDM names under the prefix they had; when that prefix
//     is "model.diffusion_model." every other tensor of the base file (VAE, text encoders) is copied beside them
//     unchanged, so the file replaces the base checkpoint;
//   diffusers: the folder <directory>/<name>/ with diffusion_pytorch_model.safetensors in diffusers' names and the
//     base's config.json (generated from the config when the base folder has none):
//     UNet2DConditionModel.from_pretrained loads it.
// Through a temporary name and a rename. Returns the file or folder written.
std::filesystem::path export_unet(const Unet& unet, const std::filesystem::path& directory, const std::string& name,
                                  DType dtype, const std::map<std::string, std::string>& metadata);

// diffusers' UNet2DConditionModel config.json for `config` (what export_unet writes when the base has none).
std::string diffusers_config_json(const UnetConfig& config);

}  // namespace wick::sdxl
