// FLUX.2 transformer sizes (dev 32B, klein 9B and 4B, their base models), and reading them from a
// checkpoint's tensor shapes in Black Forest Labs' names.
//
//   Flux2Config dev;                                              // FLUX.2-dev: 8 + 48 blocks, 6144 wide
//   Flux2Config klein = flux2::klein_4b_config();                 // 5 + 20 blocks, 3072 wide, no guidance_in
//   SafetensorsFile file = SafetensorsFile::open("flux-2-klein-base-4b.safetensors");
//   Flux2Config c = config_from_shapes(flux::tensor_shapes(file)); // every size from the shapes
//   std::map<std::string, Shape> names = parameter_shapes(c);      // the model's parameters, BFL names
//
// The RoPE widths (axes_dim) are not in the weights: every released model splits its head width into
// four equal axes (T, H, W, L: 4 x 32 of 128), which config_from_shapes assumes unless given others.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/shape.h"

namespace wick::flux2 {

// Defaults are FLUX.2-dev's (black-forest-labs/flux2, model.py Flux2Params).
struct Flux2Config {
  int64_t in_channels = 128;   // token features: the VAE's 32 channels patchified 2 x 2
  int64_t hidden_size = 6144;
  int64_t num_heads = 48;      // head width hidden_size / num_heads = sum(axes_dim)
  int64_t depth = 8;           // double-stream blocks
  int64_t depth_single = 48;   // single-stream blocks
  int64_t context_dim = 15360; // text features: 3 stacked hidden states of the text encoder
  double mlp_ratio = 3.0;      // SwiGLU width int(hidden_size * mlp_ratio)
  std::vector<int64_t> axes_dim = {32, 32, 32, 32};  // RoPE widths of the (T, H, W, L) position axes
  double theta = 2000.0;
  bool guidance_embed = true;  // dev: guidance_in; klein: none
  bool gradient_checkpointing = false;
  bool initialize = true;      // false: parameters allocated uninitialized (weights loaded next)
  DType dtype = DType::BF16;
  Device device = Device::cpu();

  int64_t head_dim() const { return hidden_size / num_heads; }
  int64_t mlp_hidden() const { return static_cast<int64_t>(static_cast<double>(hidden_size) * mlp_ratio); }
  // The VAE's latent channels before the 2 x 2 patchify (32 for the released models).
  int64_t latent_channels() const { return in_channels / 4; }
};

// FLUX.2 klein 4B (and klein-base 4B: the same architecture): Qwen3-4B's 3 x 2560 text features.
Flux2Config klein_4b_config();
// FLUX.2 klein 9B (and klein-base 9B): Qwen3-8B's 3 x 4096 text features.
Flux2Config klein_9b_config();

// Throws WickError (Config) naming the offending field when the sizes do not make a FLUX.2 model
// (non-positive sizes, hidden not divisible by heads, sum(axes_dim) != head width, odd axes).
void validate(const Flux2Config& config);

// Every size from tensor shapes under BFL names (no prefix): widths from img_in, txt_in; depths from
// the double_blocks.N / single_blocks.N indices; head width from
// double_blocks.0.img_attn.norm.query_norm.scale; MLP width from img_mlp.2; guidance_embed from the
// presence of guidance_in. Then every parameter's shape is checked and no FLUX.2 tensor may be left
// over. Missing or contradictory shapes throw WickError (Data) naming the tensor. axes_dim empty:
// four equal axes of head_width / 4.
Flux2Config config_from_shapes(const std::map<std::string, Shape>& shapes, std::vector<int64_t> axes_dim = {});

// The parameters a Flux2Transformer with `config` has, by BFL name, with their shapes.
std::map<std::string, Shape> parameter_shapes(const Flux2Config& config);
// The blocks in execution order: "double_blocks.0" ... "double_blocks.<depth-1>", "single_blocks.0" ...
std::vector<std::string> block_paths(const Flux2Config& config);

}  // namespace wick::flux2
