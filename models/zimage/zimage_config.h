// Z-Image (Turbo, Base) transformer sizes, read from a checkpoint's tensor shapes (diffusers' names,
// which are also the authors' names: Tongyi-MAI/Z-Image src/zimage/transformer.py).
//
//   ZImageConfig turbo;                                             // the released model: dim 3840, 30 layers
//   WeightSource source = WeightSource::open("Z-Image-Turbo", "transformer");
//   ZImageRope rope = rope_from_config_json(source.path());        // config.json beside the weights, else defaults
//   ZImageConfig c = config_from_shapes(mapped_shapes(source, zimage::detect_weight_format(source)), rope);
//   std::map<std::string, Shape> names = parameter_shapes(c);      // the model's parameters, diffusers names
//
// The RoPE layout (axes_dims, axes_lens, theta) cannot be read from shapes: it comes from the
// diffusers config.json when there is one, else it is the released model's ([32, 48, 48],
// [1536, 512, 512], 256; note diffusers' class default axes_lens is [1024, 512, 512]).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/shape.h"

namespace wick::zimage {

// The rotary position layout: per position axis (caption index, image row, image column) its width
// in the head and its table length (positions must stay below it), and the frequency base.
struct ZImageRope {
  std::vector<int64_t> axes_dims = {32, 48, 48};
  std::vector<int64_t> axes_lens = {1536, 512, 512};
  double theta = 256.0;
};

// Defaults are Z-Image-Turbo's (and Base's) transformer/config.json.
struct ZImageConfig {
  int64_t in_channels = 16;  // latent channels (Flux.1 VAE)
  int64_t patch_size = 2;    // 2x2 patches, one frame per token (all_f_patch_size 1)
  int64_t dim = 3840;
  int64_t n_heads = 30;          // head width dim / n_heads = sum(rope.axes_dims)
  int64_t n_layers = 30;         // main blocks ("layers")
  int64_t n_refiner_layers = 2;  // noise_refiner and context_refiner blocks each
  int64_t ffn_hidden = 10240;    // SwiGLU width, int(dim / 3 * 8) in the released models
  int64_t cap_feat_dim = 2560;   // caption features (Qwen3-4B hidden states)
  int64_t t_hidden = 1024;       // t_embedder's middle width (fixed at 1024 by the authors)
  double norm_eps = 1e-5;        // the blocks' and cap_embedder's RMSNorm eps (QK norms: 1e-5 always)
  double t_scale = 1000.0;       // t (1 = clean) is multiplied by it before the sinusoid
  ZImageRope rope;
  bool gradient_checkpointing = false;
  bool initialize = true;  // false: parameters allocated uninitialized (weights loaded next)
  DType dtype = DType::BF16;
  Device device = Device::cpu();

  int64_t head_dim() const { return dim / n_heads; }
  int64_t adaln_dim() const { return dim < 256 ? dim : 256; }  // min(dim, 256): t_embedder's output width
  int64_t patch_features() const { return patch_size * patch_size * in_channels; }
};

// Throws WickError (Config) naming the field when the sizes do not make a Z-Image model.
void validate(const ZImageConfig& config);

// Every size from tensor shapes in diffusers' names (no prefix): dim, in_channels and patch from
// all_x_embedder.2-1 (the key's "2-1" gives patch 2, frame patch 1); heads from
// layers.0.attention.norm_q (head width); layer counts from layers.N / noise_refiner.N /
// context_refiner.N; FFN width from feed_forward.w1; cap_feat_dim from cap_embedder.1; t_hidden
// from t_embedder.mlp.0. Then every parameter's shape is checked, and no Z-Image-looking tensor
// may be left over. Missing or contradictory shapes throw WickError (Data) naming the tensor.
ZImageConfig config_from_shapes(const std::map<std::string, Shape>& shapes, const ZImageRope& rope = {});

// The RoPE layout (axes_dims, axes_lens, rope_theta) of the diffusers config.json that belongs to
// `weights_path`: for a folder, its config.json or its transformer/config.json; for a file (a
// weights file, or the index WeightSource::path() names), the config.json beside it. A config.json
// without axes_dims (not a Z-Image transformer's) is passed over; none: the released model's values.
// Malformed values: WickError (Data) naming the file.
ZImageRope rope_from_config_json(const std::string& weights_path);

// The parameters a ZImageTransformer with `config` has, by diffusers name, with their shapes.
std::map<std::string, Shape> parameter_shapes(const ZImageConfig& config);
// The blocks in execution order: "noise_refiner.0".., "context_refiner.0".., "layers.0" ...
std::vector<std::string> block_paths(const ZImageConfig& config);

}  // namespace wick::zimage
