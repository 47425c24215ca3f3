// Flux.1 transformer sizes, and reading them from a checkpoint's tensor shapes (BFL names).
//
//   FluxConfig dev;                                           // Flux.1-dev: 19 + 38 blocks, 3072 wide
//   FluxConfig schnell{.guidance_embed = false};
//   SafetensorsFile file = SafetensorsFile::open("flux1-dev.safetensors");
//   FluxConfig c = config_from_shapes(tensor_shapes(file));   // every size from the shapes
//   c.dtype = DType::BF16;                                    // the file's dtype: loading is zero-copy
//   std::map<std::string, Shape> names = parameter_shapes(c); // the model's parameters, BFL names
//
// axes_dim (the RoPE widths per position axis) cannot be read from shapes: it is an argument with
// Flux's value, checked against the head width the shapes give.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/shape.h"

namespace wick {
class SafetensorsFile;
}

namespace wick::flux {

// Defaults are Flux.1-dev's (black-forest-labs/flux, util.py); schnell differs only in guidance_embed.
struct FluxConfig {
  int64_t in_channels = 64;          // packed: latent channels x 2 x 2 (16 x 4 for Flux)
  int64_t hidden_size = 3072;
  int64_t num_heads = 24;            // head width hidden_size / num_heads = sum(axes_dim)
  int64_t depth = 19;                // double-stream blocks
  int64_t depth_single = 38;         // single-stream blocks
  int64_t context_dim = 4096;        // T5-XXL width
  int64_t vec_dim = 768;             // CLIP-L pooled width
  double mlp_ratio = 4.0;            // MLP width int(hidden_size * mlp_ratio), as BFL
  std::vector<int64_t> axes_dim = {16, 56, 56};  // RoPE widths of the (0, row, column) position axes
  double theta = 10000.0;
  bool qkv_bias = true;
  bool guidance_embed = true;        // dev: guidance_in; schnell: none
  bool gradient_checkpointing = false;
  bool initialize = true;            // false: parameters allocated uninitialized (weights loaded next)
  DType dtype = DType::BF16;         // parameter dtype (the released files are bf16)
  Device device = Device::cpu();

  int64_t head_dim() const { return hidden_size / num_heads; }
  int64_t mlp_hidden() const { return static_cast<int64_t>(static_cast<double>(hidden_size) * mlp_ratio); }
  int64_t latent_channels() const { return in_channels / 4; }
};

// Throws WickError (Config) naming the offending field when the sizes do not make a Flux model
// (non-positive sizes, hidden not divisible by heads, sum(axes_dim) != head width, odd axes).
void validate(const FluxConfig& config);

// Every size from tensor shapes under BFL names (no prefix): widths from img_in, txt_in,
// vector_in, final_layer; depths from the double_blocks.N / single_blocks.N indices; head width
// from double_blocks.0.img_attn.norm.query_norm.scale; MLP width from img_mlp.0; guidance_embed
// and qkv_bias from the presence of guidance_in.in_layer.weight / img_attn.qkv.bias. Then every
// parameter's shape is checked. Missing or contradictory shapes throw WickError (Data) naming the
// tensor; dtype, device and gradient_checkpointing keep their defaults.
FluxConfig config_from_shapes(const std::map<std::string, Shape>& shapes,
                              std::vector<int64_t> axes_dim = {16, 56, 56});

// The parameters a FluxTransformer with `config` has, by BFL name, with their shapes.
std::map<std::string, Shape> parameter_shapes(const FluxConfig& config);
// The blocks in execution order: "double_blocks.0" ... "double_blocks.<depth-1>", "single_blocks.0" ...
std::vector<std::string> block_paths(const FluxConfig& config);

// Every tensor's shape in a safetensors file (no data is read).
std::map<std::string, Shape> tensor_shapes(const SafetensorsFile& file);

}  // namespace wick::flux
