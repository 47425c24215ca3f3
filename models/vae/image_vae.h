// An image VAE as `wick dataset encode` and the samplers drive it: sizes and latent normalization from the headers,
// then images -> latent moments, or latents -> images, the weights loaded on the first call. One interface over the
// AutoencoderKL (vae.h: SDXL, SD3, Flux; flux2_vae.h: FLUX.2's, patchified and batch-normalized) and the Wan VAE
// (wan_vae.h: Qwen-Image); an architecture picks its own with Architecture::open_dataset_vae (models/architecture.h).
//
//   std::unique_ptr<vae::ImageVae> vae = vae::open_kl_image_vae("FLUX.1-dev", {.dtype = DType::BF16});
//   const vae::ImageVaeInfo& info = vae->info();      // z_channels, downscale, normalization: headers only
//   vae::VaeMoments m = vae->encode(images, {.tile_size = 512});   // images [B, 3, H, W] in [-1, 1]
//   Tensor images = vae->decode_to_images(latents, {.scaling_factor = 0.3611, .shift_factor = 0.1159});  // [0, 1]
//   vae->unload();                                    // frees the weights (the next call loads them again)
//
// The Wan VAE has no tiling: open_wan_image_vae's encode runs images larger than a tile untiled (its
// memory then grows with the image), and info().tiling says so.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/vae/vae.h"
#include "models/vae/vae_weights.h"

namespace wick::vae {

// What a VAE makes, from its file headers (and config.json): no tensor read.
struct ImageVaeInfo {
  int64_t z_channels = 0;
  int64_t downscale = 8;  // image pixels per latent pixel along each axis
  // The latent normalization the dataset records: x0 = ((z - shift_factor) * scaling_factor - channel_mean[c]) /
  // channel_std[c]; channel_mean / channel_std z_channels long, or both empty (none).
  double scaling_factor = 1.0, shift_factor = 0.0;
  std::vector<double> channel_mean, channel_std;
  std::string source;  // the file or index the weights come from
  bool tiling = true;  // whether encode honours VaeTiling (false: it always runs untiled)
  int64_t image_channels = 3;
};

struct ImageVaeOptions {
  DType dtype = DType::F32;  // parameter and compute dtype
  Device device = Device::cpu();
  // The architecture's scalar normalization (DatasetSpec::normalization): what an AutoencoderKL file without a
  // config.json makes (vae_weights.h load_vae). Unused by the Wan VAE (its normalization is per channel).
  std::optional<ModelNormalization> normalization;
  // An AutoencoderKL's GroupNorm groups (VaeLoadOptions::norm_groups): 0, config.json's norm_num_groups, else 32 (every
  // real VAE). Unused by the Wan VAE.
  int64_t norm_groups = 0;
};

class ImageVae {
 public:
  virtual ~ImageVae() = default;
  const ImageVaeInfo& info() const { return info_; }
  // images [B, 3, H, W] in [-1, 1], any floating dtype and device, H and W multiples of info().downscale ->
  // mean and logvar [B, z_channels, H / f, W / f] in the options' dtype and device (un-normalized). Loads the
  // weights on the first call (WickError (Data) for a file that does not load). Tiled as VaeTiling says
  // where info().tiling.
  VaeMoments encode(const Tensor& images, const VaeTiling& tiling);
  // latents [N, z_channels, h, w] (any floating dtype and device) in the units a model trained in -> images f32
  // [N, 3, h·f, w·f] on the CPU in [0, 1]: info()'s per-channel lists and then `normalization`'s scalar factors (a
  // dataset's, which may differ from the file's) undone, ((x·std_c + mean_c) / scale) + shift, the decoder run on the
  // options' device in their dtype one latent at a time (its activations are the peak), (x + 1) / 2 clamped. Loads the
  // weights on the first call; no autograd graph.
  Tensor decode_to_images(const Tensor& latents, const LatentNormalization& normalization);
  // Frees the weights; a later call loads them again. Never throws.
  virtual void unload() noexcept = 0;

 protected:
  explicit ImageVae(ImageVaeInfo info) : info_(std::move(info)) {}
  virtual VaeMoments encode_loaded(const Tensor& images, const VaeTiling& tiling) = 0;
  // One latent f32 [1, z_channels, h, w] on the CPU in the model's units -> the decoder's pixels f32 [1, 3, H, W] on
  // the CPU (about [-1, 1]).
  virtual Tensor decode_loaded(const Tensor& latent, const LatentNormalization& normalization) = 0;

 private:
  ImageVaeInfo info_;
};

// The AutoencoderKL at `path` (load_vae's paths: a file, an index, a vae/ folder, or a pipeline folder), its sizes
// from read_vae_header's lookup and its normalization as load_vae resolves it (config.json, else
// options.normalization; neither: WickError (Config)). WickError (Data) for weights that are not an AutoencoderKL.
std::unique_ptr<ImageVae> open_kl_image_vae(const std::string& path, const ImageVaeOptions& options);
// open_kl_image_vae or open_wan_image_vae: what an architecture's sampler opens (models/diffusion/latent_image_sampler.h).
using OpenImageVae = std::unique_ptr<ImageVae> (*)(const std::string& path, const ImageVaeOptions& options);
// The Wan 2.1 / Qwen-Image VAE at `path` (load_wan_vae's paths), single images (T = 1): its sizes from the shapes,
// scale 1, shift 0 and the per-channel latents_mean / latents_std of config.json (else Wan 2.1's for z 16).
// Untiled always (info().tiling is false). decode_to_images gives qwenimage_decode's images (models/qwenimage).
std::unique_ptr<ImageVae> open_wan_image_vae(const std::string& path, const ImageVaeOptions& options);

}  // namespace wick::vae
