// Qwen-Image (and Qwen-Image-Edit) transformer sizes, read from a checkpoint's tensor shapes in
// diffusers' names (QwenImageTransformer2DModel, diffusers 0.42.1), which ComfyUI's single files keep.
//
//   QwenImageConfig released;                                        // dim 3072, 60 blocks, 24 heads
//   WeightSource source = WeightSource::open("Qwen-Image", "transformer");
//   QwenImageJson json = config_json_of(source.path());              // axes_dims_rope, patch_size, zero_cond_t
//   QwenImageConfig c = config_from_shapes(mapped_shapes(source, qwenimage::detect_weight_format(source)), json);
//   std::map<std::string, Shape> names = parameter_shapes(c);       // the model's parameters, diffusers names
//
// What shapes cannot tell (the RoPE axes, the patch size, Edit-2511's zero_cond_t) comes from the
// diffusers config.json when there is one, else it is the released model's ((16, 56, 56), 2, off).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/shape.h"

namespace wick::qwenimage {

// The settings of a diffusers config.json that the weights' shapes do not give.
struct QwenImageJson {
  std::vector<int64_t> axes_dims = {16, 56, 56};  // RoPE widths of the (frame, row, column) axes
  int64_t patch_size = 2;
  bool zero_cond_t = false;  // Qwen-Image-Edit-2511: reference tokens modulated at t = 0
};

// Defaults are Qwen-Image's transformer/config.json (Qwen-Image-2512, Edit, Edit-2509 share it).
struct QwenImageConfig {
  int64_t in_channels = 64;   // packed token features: out_channels x patch x patch, (c, ph, pw) order
  int64_t out_channels = 16;  // latent channels (the Qwen-Image VAE's z_dim)
  int64_t patch_size = 2;
  int64_t dim = 3072;
  int64_t n_heads = 24;
  int64_t n_layers = 60;
  int64_t mlp_hidden = 12288;  // 4 x dim in the released model
  int64_t text_dim = 3584;     // joint_attention_dim: Qwen2.5-VL-7B hidden states
  std::vector<int64_t> axes_dims = {16, 56, 56};
  double theta = 10000.0;
  bool zero_cond_t = false;
  bool gradient_checkpointing = false;
  bool initialize = true;  // false: parameters allocated uninitialized (weights loaded next)
  DType dtype = DType::BF16;
  Device device = Device::cpu();

  int64_t head_dim() const { return dim / n_heads; }
  int64_t patch_features() const { return patch_size * patch_size * out_channels; }
};

// Throws WickError (Config) naming the field when the sizes do not make a Qwen-Image model.
void validate(const QwenImageConfig& config);

// Every size from tensor shapes in diffusers' names (no prefix): dim and in_channels from img_in,
// text_dim from txt_in, out_channels from proj_out (rows / patch^2), heads from
// transformer_blocks.0.attn.norm_q (head width), MLP width from img_mlp.net.0.proj, the block count
// from transformer_blocks.N. Then every parameter's shape is checked and no Qwen-Image-looking tensor
// may be left over. Missing or contradictory shapes throw WickError (Data) naming the tensor.
QwenImageConfig config_from_shapes(const std::map<std::string, Shape>& shapes, const QwenImageJson& json = {});

// The settings of the diffusers config.json that belongs to `weights_path`: for a folder, its
// config.json or its transformer/config.json; for a file, the config.json beside it. A config.json
// without axes_dims_rope (not a Qwen-Image transformer's) is passed over; none: the defaults.
// Malformed values, or the Layered model's flags (use_additional_t_cond, use_layer3d_rope), which
// wick does not run: WickError (Data) naming the file.
QwenImageJson config_json_of(const std::string& weights_path);

// The parameters a QwenImageTransformer with `config` has, by diffusers name, with their shapes.
std::map<std::string, Shape> parameter_shapes(const QwenImageConfig& config);
// "transformer_blocks.0" ... in execution order.
std::vector<std::string> block_paths(const QwenImageConfig& config);

}  // namespace wick::qwenimage
