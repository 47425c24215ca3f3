// An architecture wick trains (the DiT, Flux, ...): what the registry (models/registry.h) holds for
// each one, and the model interface the diffusion recipe drives.
//
//   const Architecture& arch = find_architecture("flux");
//   std::shared_ptr<DiffusionModel> model = arch.build({.model = config.model, .data = geometry,
//                                                       .dtype = DType::BF16, .device = Device::cuda(0)});
//   Tensor v = model->predict(x_t, sigma, cond);               // x_t [B, C, H, W], sigma [B] in [0, 1]
//   std::vector<std::string> targets = arch.targets("attention");   // LoRA target patterns of a preset
//   auto sampler = arch.make_sampler({.config = config, .dataset = *dataset, .device = device});   // images
//   std::optional<DatasetSpec> spec = arch.dataset_spec();     // what `wick dataset encode --model flux` makes
//   auto encoder = arch.make_prompt_encoder({.pipeline = "FLUX.1-dev"});   // its text encoders, one interface
//
// An architecture is one folder under models/ (models/dit, models/flux) plus one line in
// models/registry.cpp. It owns its config keys (schema), how it reads its sizes from the dataset
// and from the base weights, its weight formats and key maps, its LoRA target presets and its LoRA
// file naming, the dataset it trains on (latent channels, VAE normalization, bucket divisor, text
// encoders), its prompt encoder, and how it turns prompts into images. Nothing outside its folder
// names it or its layers (tests/arch_names_test.sh checks).
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
#include "models/diffusion/denoiser.h"
#include "models/image_sampler.h"
#include "models/memory/activation_memory.h"
#include "models/text/prompt_encoder.h"
#include "models/vae/vae_config.h"
#include "models/weights/lora_format.h"
#include "runtime/device.h"

namespace wick {

namespace vae {
class ImageVae;  // models/vae/image_vae.h
struct ImageVaeOptions;
}  // namespace vae

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
  // (its adapters and trainable parameters decide what backward keeps). models/memory/activation_memory.h.
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

// Whether `wick dataset encode --config` stores the training config's negative prompt after its sample prompts
// (architectures that sample with classifier-free guidance need it encoded like them).
enum class StoredNegative {
  Never,         // no negative prompt (Flux: guidance is an input)
  Always,        // "" included (SD3 encodes the empty negative prompt like any prompt)
  WhenNotEmpty,  // only a non-empty one (SDXL: the empty negative prompt is zeros, force_zeros_for_empty_prompt)
};

// What `wick dataset encode --model <arch>` makes from a folder of images and captions for the architecture: the
// latents of its VAE (Architecture::open_dataset_vae: an AutoencoderKL unless the architecture says otherwise) and
// the embeddings of its prompt encoder. Every sample also keeps its source image's size, crop and mirroring (a few
// integers): the architectures that condition on them (SDXL's micro-conditioning) read them, so none declares them.
struct DatasetSpec {
  int64_t latent_channels = 16;            // the VAE's z channels the model takes (SDXL 4, SD3 and Flux 16)
  vae::LatentNormalization normalization;  // latents = (z - shift) * scale for its VAE (MODELS.md 1.5)
  int64_t patch = 1;                       // bucket sides are multiples of the VAE's downscale x patch (Flux 2)
  StoredNegative negative = StoredNegative::Never;
  text::PromptSpec prompts;                // the files and options make_prompt_encoder takes
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
  // What a dataset of images encoded for it holds; nullopt: the architecture is not trained from images through a
  // VAE and text encoders (the small DiT trains on packed datasets).
  virtual std::optional<DatasetSpec> dataset_spec() const { return std::nullopt; }
  // Its text encoders behind text::PromptEncoder (models/text/prompt_encoder.h), headers read, nothing loaded:
  // request.files named by dataset_spec()->prompts.parts, request.options its prompt options. WickError (Config)
  // for an architecture without text encoders, neither a pipeline nor the files, a missing file; (Data) the
  // encoders' own checks.
  virtual std::unique_ptr<text::PromptEncoder> make_prompt_encoder(const text::PromptEncoderRequest& request) const;
  // Its VAE at `path` for `wick dataset encode` (models/vae/image_vae.h), headers read, nothing loaded. The default:
  // an AutoencoderKL (open_kl_image_vae) whose normalization, where the file has no config.json, is
  // options.normalization, else dataset_spec()->normalization. Errors as open_kl_image_vae's.
  virtual std::unique_ptr<vae::ImageVae> open_dataset_vae(const std::string& path,
                                                          const vae::ImageVaeOptions& options) const;

  // network.target resolved: preset names expand to their patterns, other entries are glob patterns
  // kept as written; empty = the default preset.
  std::vector<std::string> targets(const std::vector<std::string>& configured) const;
};

}  // namespace wick
