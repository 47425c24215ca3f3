// The SDXL UNet's sizes (Stability AI's sgm UNetModel, the LDM layout of sd_xl_base_1.0.safetensors), and reading them
// from a checkpoint's tensor shapes. The same layout covers the SD 1.x / 2.x UNets (no label_emb, 1x1-conv proj_in in
// 1.x, a fixed head count in 1.x).
//
//   UnetConfig base = UnetConfig::sdxl_base();           // 320 x (1, 2, 4), attention depth (0, 2, 10), mid 10
//   UnetConfig c = config_from_shapes(mapped_shapes(source, format), {.head_dim = 64});   // sizes from the shapes
//   std::map<std::string, Shape> names = parameter_shapes(c);   // every parameter, LDM names
//   int64_t i = input_block_index(c, /*level=*/1, /*res=*/0);    // 4: input_blocks.4 = level 1's first resnet
//
// What no shape gives, and comes from the hints (an explicit model option, else a diffusers config.json, else SDXL's
// value): the head width (64) or a fixed head count (SD 1.x: 8), the GroupNorm groups (32), and the width of each
// micro-conditioning value's sinusoid (256; label_emb's input is pooled + 6 of them).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/shape.h"

namespace wick::sdxl {

// Defaults are SDXL base's (sgm configs/inference/sd_xl_base.yaml).
struct UnetConfig {
  int64_t in_channels = 4;                           // latent channels
  int64_t out_channels = 4;
  int64_t model_channels = 320;                      // level 0's width
  std::vector<int64_t> channel_mult = {1, 2, 4};     // level l is model_channels · channel_mult[l] wide
  int64_t num_res_blocks = 2;                        // resnets per level down (one more up)
  std::vector<int64_t> transformer_depth = {0, 2, 10};  // per level; 0 = the level has no spatial transformers
  int64_t transformer_depth_middle = 10;             // the middle block's transformer
  int64_t time_embed_dim = 1280;                     // time_embed's width (4 · model_channels in sgm)
  int64_t head_dim = 64;                             // num_head_channels; used when num_heads is 0
  int64_t num_heads = 0;                             // > 0: every transformer has this many heads (SD 1.x: 8)
  int64_t context_dim = 2048;                        // cross-attention keys: CLIP-L 768 + bigG 1280
  int64_t adm_in_channels = 2816;                    // label_emb's input; 0 = none (SD 1.x / 2.x)
  int64_t size_embed_dim = 256;                      // each micro-conditioning value's sinusoid width
  bool linear_projection = true;                     // proj_in / proj_out Linear (SDXL, SD 2.x) or 1x1 conv (SD 1.x)
  int64_t norm_groups = 32;                          // every GroupNorm
  bool gradient_checkpointing = false;
  bool initialize = true;                            // false: parameters allocated uninitialized (loaded next)
  DType dtype = DType::BF16;
  Device device = Device::cpu();

  int64_t n_levels() const { return static_cast<int64_t>(channel_mult.size()); }
  int64_t level_channels(int64_t level) const { return model_channels * channel_mult.at(static_cast<size_t>(level)); }
  bool attention(int64_t level) const { return transformer_depth.at(static_cast<size_t>(level)) > 0; }
  // Heads of a transformer `channels` wide, and their width.
  int64_t heads(int64_t channels) const { return num_heads > 0 ? num_heads : channels / head_dim; }
  int64_t head_width(int64_t channels) const { return num_heads > 0 ? channels / num_heads : head_dim; }
  // The pooled text vector label_emb takes before the six size sinusoids (SDXL: bigG's 1280).
  int64_t pooled_dim() const { return adm_in_channels > 0 ? adm_in_channels - 6 * size_embed_dim : 0; }
  // Latent sizes must be multiples of this (one halving per level below the first).
  int64_t size_multiple() const { return int64_t{1} << (n_levels() - 1); }

  static UnetConfig sdxl_base();  // 2,567,463,684 parameters
};

// Throws WickError (Config) naming the offending field when the sizes do not make a UNet.
void validate(const UnetConfig& config);

// The input_blocks / output_blocks index of level `level`'s resnet `res` (res <= num_res_blocks on the way up), and of
// a level's downsampler (down) and upsampler (up, in the block of its last resnet).
int64_t input_block_index(const UnetConfig& config, int64_t level, int64_t res);
int64_t downsample_index(const UnetConfig& config, int64_t level);
int64_t output_block_index(const UnetConfig& config, int64_t level, int64_t res);
// The module path of level `level`'s upsampler: output_blocks.N.2.conv after a spatial transformer,
// output_blocks.N.1.conv without one (sgm's slot rule).
std::string upsample_path(const UnetConfig& config, int64_t level);

// The UNet's blocks in execution order, as sgm numbers them and as its gradient checkpointing runs them:
// "input_blocks.0" (conv_in) ... "input_blocks.<n-1>", "middle_block", "output_blocks.0" ... (sgm's units, whose
// names kohya's SDXL LoRA keys carry: 9 + 1 + 9 for SDXL base). What block swapping streams and model.quantize:
// float8 quantizes (the Linears in them; the time and label embeddings and the output head are not blocks).
std::vector<std::string> block_paths(const UnetConfig& config);

// The facts no tensor shape holds; 0 = not known (config_from_shapes then takes SDXL's value).
struct ConfigHints {
  int64_t head_dim = 0;
  int64_t num_heads = 0;
  int64_t norm_groups = 0;
  int64_t size_embed_dim = 0;
};

// Every size from tensor shapes under LDM names (no prefix): channels from input_blocks.0.0 and out.2, the levels,
// resnets per level and each level's transformer depth from input_blocks (a resnet, a transformer after it or a
// downsampler in each block), the middle depth from middle_block.1, the projections' kind from proj_in's rank, the
// context width from attn2.to_k, time_embed's width, label_emb's input (absent in SD 1.x / 2.x). Then every parameter's
// shape is checked and no LDM-named tensor may be left over. WickError (Data) naming the tensor otherwise; dtype,
// device and gradient_checkpointing keep their defaults.
UnetConfig config_from_shapes(const std::map<std::string, Shape>& shapes, const ConfigHints& hints = {});

// The parameters a UNet with `config` has, by LDM name, with their shapes.
std::map<std::string, Shape> parameter_shapes(const UnetConfig& config);

// "SDXL base", "SD 1.x UNet", "SD 2.x UNet", or "SDXL-like UNet" / "UNet" for other sizes.
std::string variant_name(const UnetConfig& config);

}  // namespace wick::sdxl
