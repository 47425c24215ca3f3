// The small DiT as a registered architecture (`model.arch: dit`): its config keys, its geometry
// from the dataset (one square latent size) or from a wick weights file, its LoRA presets.
//
//   const Architecture& arch = dit_architecture();
//   auto model = arch.build({.model = config.model, .data = geometry, .dtype = DType::F32});
//
// Keys (model.*): in_channels (0 = from the data), patch_size, hidden_size, depth, num_heads,
// mlp_ratio, text_dim (0 = from the data). docs/models.md describes the model.
#pragma once

#include <string>

#include "models/architecture.h"
#include "models/dit/dit.h"

namespace wick {

const Architecture& dit_architecture();

// The DiT sizes stored in a DiT weights file (pos_embed, x_embedder, context_embedder, y_embedder)
// for patch size `patch_size`: latent channels and size, text and pooled widths. A file without those
// tensors is a Config error.
DataGeometry dit_weights_geometry(const std::string& weights_file, int64_t patch_size);

// The weights file model.name_or_path names: the path itself when it is a file, <dir>/model.safetensors
// for a directory (a checkpoint, or `latest`). A missing path is a Config error naming it.
std::string resolve_weights_file(const std::string& name_or_path);

}  // namespace wick
