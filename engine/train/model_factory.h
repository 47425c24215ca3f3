// Building the model a training config describes, and the LoRA/DoRA weights file (kohya keys).
//
//   auto ds = LatentDataset::open(config.datasets[0].path);
//   std::shared_ptr<DiT> model = build_model(config, *ds, Device::cpu());  // base loaded, adapters applied
//   save_lora(*model, config, "output/run/lora/run.safetensors", step, sha256_file(base_file));
//   load_lora(*other, "output/run/lora/run.safetensors");                  // onto a model with adapters
//   save_model_weights(*model, config, "output/run/model/run.safetensors", step);  // network.type full
//
// build_model: the DiT from config.model, with in_channels / text_dim / pooled width / latent size
// taken from the dataset (a config value that contradicts the dataset is a Config error); base
// weights from config.model.name_or_path (a .safetensors file, or a checkpoint directory such as
// output/<run>/checkpoints/latest, whose model.safetensors is read) frozen; then network.type:
// full trains every parameter, lora/dora wrap the target Linears and train only the adapters.
// Parameters are initialized from train.seed (the same model on every rank and device).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/config/train_config.h"
#include "engine/data/latent_dataset.h"
#include "models/dit/dit.h"
#include "runtime/device.h"

namespace wick {

// What the model's input layers must fit: latents [B, latent_channels, latent_size, latent_size],
// text tokens [B, L, text_dim], pooled text [B, pooled_dim].
struct ModelGeometry {
  int64_t latent_channels = 0;
  int64_t latent_size = 0;
  int64_t text_dim = 0;
  int64_t pooled_dim = 0;
};

// The geometry of a dataset: every bucket must be square and of one size (the DiT's position table
// has a fixed size); otherwise a Config error naming the buckets.
ModelGeometry dataset_geometry(const LatentDataset& data);
// The geometry stored in a DiT weights file (pos_embed, x_embedder, context_embedder, y_embedder)
// for patch size `patch_size`; a file without those tensors is a Config error.
ModelGeometry weights_geometry(const std::string& weights_file, int64_t patch_size);

// The weights file model.name_or_path names: the path itself when it is a file, <dir>/model.safetensors
// for a directory (a checkpoint, or `latest`). A missing path is a Config error naming it.
std::string resolve_weights_file(const std::string& name_or_path);

// The compute dtype of a run: train.mixed_precision when set (bf16 / f16), else model.dtype. The model's
// parameters are stored in it (the optimizer keeps f32 masters of 16-bit trainable parameters).
DType compute_dtype(const TrainConfig& config);

// The DiTConfig for `config` on `geometry`; Config errors for a contradiction (model.in_channels or
// model.text_dim set and different from the data's, hidden_size not divisible by 4, the latent size not
// divisible by the patch size) or an arch wick cannot build (flux, sd3, sdxl).
DiTConfig make_dit_config(const TrainConfig& config, const ModelGeometry& geometry, Device device);

// The model, ready to train (see the top of this file). Shapes in the base weights file that do not
// fit the configured model are a Config error naming the tensor, both shapes and the config keys.
std::shared_ptr<DiT> build_model(const TrainConfig& config, const ModelGeometry& geometry, Device device);
std::shared_ptr<DiT> build_model(const TrainConfig& config, const LatentDataset& data, Device device);
// The same from the dataset's attributes: latent channels from `data`; the latent size and text widths
// from the base weights (model.name_or_path must be set, e.g. a run's checkpoints/latest). Without base
// weights this is a Config error (use the LatentDataset form).
std::shared_ptr<DiT> build_model(const TrainConfig& config, const LatentDatasetAttributes& data, Device device);

// The kohya name of a module path: "blocks.0.attn.q" -> "lora_unet_blocks_0_attn_q".
std::string kohya_lora_name(const std::string& module_path);

// Writes the adapters of `model` (apply_adapters) as safetensors with kohya keys, tensors in
// config.save.dtype: <name>.lora_down.weight [r, in], <name>.lora_up.weight [out, r], <name>.alpha (0-d),
// and for DoRA <name>.dora_scale [1, in] (input-axis DoRA only: an output-axis one is a Usage error);
// a LoRA on a Conv2d writes kohya's LoCon shapes, [r, in, kh, kw] and [out, r, 1, 1].
// Metadata: ss_network_dim, ss_network_alpha, ss_network_module
// ("networks.lora"; DoRA "lycoris.kohya" with ss_network_args), ss_base_model_hash (sha256 of the base
// file, as given), ss_steps, wick_network_type, wick_config (the resolved YAML). Written through a
// temporary file and a rename. A model without adapters is a Usage error.
void save_lora(const Module& model, const TrainConfig& config, const std::string& path, int64_t step,
               const std::string& base_model_hash);

// Writes every parameter of `model` (a network.type full run's trained model) as safetensors in
// config.save.dtype under the model's own parameter names, so the file loads back as
// model.name_or_path (load_parameters casts to the model's dtype). Metadata: wick_network_type
// ("full"), wick_step, wick_config (the resolved YAML). Written through a temporary file and a rename.
void save_model_weights(const Module& model, const TrainConfig& config, const std::string& path, int64_t step);

// Loads a file written by save_lora (or kohya-style with the same module names) into the adapters of
// `model`. Every adapter must find its tensors with the same rank, alpha and kind (LoRA / DoRA), and
// every lora tensor of the file must belong to an adapter; otherwise a Data error naming the file and
// the key. An output-axis DoRA in `model` is a Usage error (kohya files carry the input-axis dora_scale).
void load_lora(Module& model, const std::string& path);

}  // namespace wick
