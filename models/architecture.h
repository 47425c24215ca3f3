// An architecture wick trains (the DiT, Flux, ...): what the registry (models/registry.h) holds for
// each one, and the model interface the diffusion recipe drives.
//
//   const Architecture& arch = find_architecture("flux");
//   std::shared_ptr<DiffusionModel> model = arch.build({.model = config.model, .data = geometry,
//                                                       .dtype = DType::BF16, .device = Device::cuda(0)});
//   Tensor v = model->predict(x_t, sigma, cond);               // x_t [B, C, H, W], sigma [B] in [0, 1]
//   std::vector<std::string> targets = arch.targets("attention");   // LoRA target patterns of a preset
//   auto sampler = arch.make_sampler({.config = config, .dataset = *dataset, .device = device});   // images
//
// An architecture is one folder under models/ (models/dit, models/flux) plus one line in
// models/registry.cpp. It owns its config keys (schema), how it reads its sizes from the dataset
// and from the base weights, its weight formats and key maps, its LoRA target presets and its LoRA
// file naming, and how it turns prompts into images. Nothing outside its folder names its layers.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/block_swap.h"
#include "engine/config/train_config.h"
#include "engine/module.h"
#include "models/activation_memory.h"
#include "models/diffusion/denoiser.h"
#include "models/image_sampler.h"
#include "models/weights/lora_format.h"
#include "runtime/device.h"

namespace wick {

// What the cached-latent dataset gives a model's input layers.
struct DataGeometry {
  std::string model_family;  // the dataset's model_family attribute ("" = not known)
  int64_t latent_channels = 0;
  std::vector<std::pair<int64_t, int64_t>> latent_sizes;  // (H, W) of every bucket; empty = not known
  int64_t text_length = 0;  // L of text/embeds
  int64_t text_dim = 0;     // D of text/embeds
  int64_t pooled_dim = 0;   // P of text/pooled
};

// The model a run needs: the `model:` section, the dataset's geometry, the parameters' dtype and
// device, the initialization seed and gradient checkpointing.
struct ModelRequest {
  const ModelConfig& model;
  DataGeometry data;
  DType dtype = DType::F32;
  Device device = Device::cpu();
  uint64_t seed = 0;
  bool gradient_checkpointing = false;
};

// A denoiser with named parameters. Its parameter names are the ones its original weights use, so
// base files load without renaming and LoRA files name the layers users know.
class DiffusionModel : public Module {
 public:
  // x_t [B, C, H, W] in the model's dtype; time F32 [B] in [0, 1]: σ for flow matching, t / 1000 for
  // DDPM (each model scales it for its own embedder); cond: the text conditioning. Returns the
  // prediction in x_t's shape and dtype.
  virtual Tensor predict(const Tensor& x_t, const Tensor& time, const diffusion::Conditioning& cond) = 0;
  virtual void set_gradient_checkpointing(bool on) = 0;
  // "DiT (hidden 96, depth 3, heads 4)": for the start-up line.
  virtual std::string summary() const = 0;
  // Config error (naming the bucket) when latents of h x w do not fit the model.
  virtual void check_latent_size(int64_t h, int64_t w) const = 0;
  // The dtype the parameters (and the compute) are in.
  virtual DType dtype() const = 0;
  // The registered architecture it belongs to ("dit", "flux").
  virtual std::string arch_name() const = 0;
  // What a training step's activations take, segment by segment (embedders, each block, output and
  // loss), for micro-batches of `shape` with gradient checkpointing on or off, as the model is now
  // (its adapters and trainable parameters decide what backward keeps). models/activation_memory.h.
  virtual ActivationProfile activation_profile(const ActivationShape& shape, bool checkpointing) const = 0;
  // The model's repeated blocks in execution order, as module paths ("double_blocks.0", ...): what
  // block swapping streams (train.blocks_to_swap: the last N of them) and what model.quantize
  // quantizes (their Linears). Empty: the model supports neither.
  virtual std::vector<std::string> block_paths() const { return {}; }
  // Streams the frozen weights of `swapper`'s blocks (named by block_paths) around each block's run
  // (engine/block_swap.h); nullptr turns it off. Models without blocks refuse.
  virtual void set_block_swapper(std::shared_ptr<BlockSwapper> swapper);
  // The swapper set_block_swapper attached, or nullptr.
  virtual const BlockSwapper* block_swapper() const { return nullptr; }
  // The activations' peak bytes: activation_profile(shape, checkpointing).peak_bytes().
  int64_t activation_bytes(const ActivationShape& shape, bool checkpointing) const {
    return activation_profile(shape, checkpointing).peak_bytes();
  }
};

// How an architecture's LoRA files look (models/lora_files.h writes and reads them). kohya names are
// "lora_unet_" + the module path with '.' -> '_' for every architecture.
struct LoraNaming {
  std::map<std::string, std::string> metadata;  // ss_base_model_version, modelspec.architecture, ...
  // How its modules split into diffusers/PEFT modules (models/weights/lora_format.h); none: each
  // module is one PEFT module of the same path under "transformer.".
  std::optional<LoraLayout> peft_layout;
};

class Architecture {
 public:
  virtual ~Architecture() = default;
  // Its names, flag and `model:` keys (engine/config/train_config.h).
  virtual const ArchSchema& schema() const = 0;
  const std::string& name() const { return schema().name; }
  // The model with its base weights loaded (frozen) when request.model.name_or_path is set, else
  // initialized from request.seed. Config errors for a model that cannot fit the dataset; Data errors
  // (exit status 3) for weights that do not fit the architecture.
  virtual std::shared_ptr<DiffusionModel> build(const ModelRequest& request) const = 0;
  // LoRA target presets: name -> glob patterns over module paths; the default preset's name.
  virtual std::map<std::string, std::vector<std::string>> target_presets() const = 0;
  virtual std::string default_preset() const = 0;
  // LoCon (network.conv > 0, kohya's conv_dim): glob patterns over the module paths of the blocks whose convolutions
  // larger than 1x1 take network.conv's rank and alpha, while their Linear and 1x1 layers take network.linear's (as
  // kohya adds them with conv_dim). Empty: the architecture has no such convolutions (network.conv is refused).
  virtual std::vector<std::string> conv_targets() const { return {}; }
  // Writes a full fine-tune's trained model (network.type full) in `dtype` with `metadata` under `directory`, in the
  // layout its base weights came in, so that it loads where the base does; returns the file or folder written. The
  // default: every parameter under the model's own names in <directory>/<name>.safetensors.
  virtual std::filesystem::path export_model(const DiffusionModel& model, const std::filesystem::path& directory,
                                             const std::string& name, DType dtype,
                                             const std::map<std::string, std::string>& metadata) const;
  // LoRA file naming for `model` (it may depend on the variant: Flux dev or schnell).
  virtual LoraNaming lora_naming(const DiffusionModel& model) const = 0;
  // What makes sample images for a run of this architecture (models/image_sampler.h): everything it needs
  // found and its headers read, so that a run with sample.every > 0 fails before its first step. A Config
  // error naming what is missing and the key to set when images cannot be made.
  virtual std::unique_ptr<ImageSampler> make_sampler(const SamplerRequest& request) const = 0;

  // network.target resolved: preset names expand to their patterns, other entries are glob patterns
  // kept as written; empty = the default preset.
  std::vector<std::string> targets(const std::vector<std::string>& configured) const;
};

}  // namespace wick
