// SD3 / SD3.5 MMDiT sizes, and reading them from a checkpoint's tensor shapes (Stability AI's names).
//
//   Sd3Config large = Sd3Config::large();                   // SD3.5 Large: 38 blocks, 2432 wide, qk norm
//   Sd3Config medium = Sd3Config::medium();                 // SD3.5 Medium: 24 blocks, attn2 in blocks 0..12
//   SafetensorsFile file = SafetensorsFile::open("sd3.5_medium.safetensors");
//   Sd3Config c = config_from_shapes(mapped_shapes(source, format));   // every size from the shapes
//   std::map<std::string, Shape> names = parameter_shapes(c);          // the model's parameters, SAI names
//
// The head width is not in the shapes of a file without QK norm (SD3 Medium 1.0): it comes from the
// argument, and SAI's own loader assumes 64 (hidden = 64 · heads).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/shape.h"

namespace wick::sd3 {

// Defaults are SD3.5 Large's (Stability-AI/sd3.5, mmditx.py and sd3_impls.py).
struct Sd3Config {
  int64_t patch_size = 2;
  int64_t in_channels = 16;           // latent channels
  int64_t out_channels = 16;
  int64_t hidden_size = 2432;         // 64 · depth in SAI's models
  int64_t num_heads = 38;             // head width hidden_size / num_heads (64)
  int64_t depth = 38;                 // joint blocks; the last one's context stream is pre-only
  int64_t context_dim = 4096;         // context_embedder input: CLIP-L + bigG zero-padded, then T5-XXL
  int64_t pooled_dim = 2048;          // y_embedder input: CLIP-L + bigG pooled
  int64_t pos_embed_max_size = 192;   // the learned position table is max x max patches
  double mlp_ratio = 4.0;             // MLP width int(hidden_size · mlp_ratio)
  bool qk_norm = true;                // RMSNorm on q and k per head (SD3.5; SD3 Medium 1.0 has none)
  std::vector<int64_t> dual_attention_layers = {};  // blocks whose x_block has attn2 (Medium: 0..12)
  bool gradient_checkpointing = false;
  bool initialize = true;             // false: parameters allocated uninitialized (weights loaded next)
  DType dtype = DType::BF16;
  Device device = Device::cpu();

  int64_t head_dim() const { return hidden_size / num_heads; }
  int64_t mlp_hidden() const { return static_cast<int64_t>(static_cast<double>(hidden_size) * mlp_ratio); }
  bool dual_attention(int64_t block) const;
  // final_layer.linear's outputs: patch_size² · out_channels, ordered (row in patch, column, channel).
  int64_t out_features() const { return patch_size * patch_size * out_channels; }

  static Sd3Config large();   // 38 blocks, hidden 2432, pos_embed 192², qk norm: 8.1 B parameters
  static Sd3Config medium();  // 24 blocks, hidden 1536, pos_embed 384², qk norm, attn2 in 0..12: 2.5 B
};

// Throws WickError (Config) naming the offending field when the sizes do not make an MMDiT.
void validate(const Sd3Config& config);

// Every size from tensor shapes under SAI's names (no prefix): hidden, latent channels and patch size
// from x_embedder.proj, the table size from pos_embed ([1, max², hidden]), context and pooled widths
// from context_embedder and y_embedder, the depth from the joint_blocks.N indices, the MLP width from
// fc1, QK norm from joint_blocks.0.x_block.attn.ln_q, the dual-attention blocks from
// x_block.attn2.qkv (a block with other attn2 tensors but no attn2.qkv, or with attn2 and a 6-way
// modulation, is refused as inconsistent), the head width from ln_q or else `head_dim` (0: SAI's 64).
// Then every parameter's shape is checked and no SAI-named tensor may be left over. WickError (Data)
// naming the tensor otherwise; dtype, device and gradient_checkpointing keep their defaults.
Sd3Config config_from_shapes(const std::map<std::string, Shape>& shapes, int64_t head_dim = 0);

// The parameters an MMDiT with `config` has, by SAI name, with their shapes.
std::map<std::string, Shape> parameter_shapes(const Sd3Config& config);

// The joint blocks in execution order, "joint_blocks.0" ... "joint_blocks.<depth-1>": what block swapping
// streams and model.quantize: float8 quantizes (DiffusionModel::block_paths).
std::vector<std::string> block_paths(const Sd3Config& config);

// "SD3.5 Large", "SD3.5 Medium", "SD3 Medium" (no QK norm), or "SD3 (MMDiT)" for other sizes.
std::string variant_name(const Sd3Config& config);

}  // namespace wick::sd3
