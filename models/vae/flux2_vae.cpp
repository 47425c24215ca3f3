#include "models/vae/flux2_vae.h"

#include <cmath>
#include <utility>
#include <vector>

#include "models/vae/vae_weights.h"
#include "models/vae/wan_vae_config.h"
#include "runtime/error.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/layout.h"

namespace wick::vae {
namespace {

// sqrt(running_var[c] + eps): the per-channel deviation BatchNorm2d divides by in eval mode.
std::vector<double> batch_norm_std(const LatentBatchNorm& bn) {
  std::vector<double> out;
  for (double var : bn.running_var) out.push_back(std::sqrt(var + bn.eps));
  return out;
}

ImageVaeInfo flux2_info(const VaeHeader& header, const LatentBatchNorm& bn) {
  const VaeConfig& c = header.config;
  return {.z_channels = bn.patch * bn.patch * c.z_channels,
          .downscale = c.downscale() * bn.patch,
          .scaling_factor = c.normalization.scaling_factor,
          .shift_factor = c.normalization.shift_factor,
          .channel_mean = bn.running_mean,
          .channel_std = batch_norm_std(bn),
          .source = header.source_path,
          .tiling = true};
}

// The AutoencoderKL with a latent BatchNorm: load_vae on the first encode or decode, the moments patchified after it,
// the latents unpatchified before it.
class Flux2ImageVae final : public ImageVae {
 public:
  Flux2ImageVae(std::string path, VaeLoadOptions options, const VaeHeader& header, const LatentBatchNorm& bn)
      : ImageVae(flux2_info(header, bn)), path_(std::move(path)), options_(std::move(options)), patch_(bn.patch) {}

  void unload() noexcept override { model_.reset(); }

 private:
  AutoencoderKL& model() {
    if (!model_) model_ = load_vae(path_, options_).model;
    return *model_;
  }

  VaeMoments encode_loaded(const Tensor& images, const VaeTiling& tiling) override {
    const VaeMoments moments = model().encode(images, tiling);
    return {.mean = pixel_unshuffle(moments.mean, patch_), .logvar = pixel_unshuffle(moments.logvar, patch_)};
  }

  // As the pipelines decode: the BatchNorm undone per channel, then a dataset's scalar factors when they are not 1
  // and 0, the 2 x 2 patches back to pixels of the 32-channel latent.
  Tensor decode_loaded(const Tensor& latent, const LatentNormalization& normalization) override {
    AutoencoderKL& vae = model();
    Tensor z = denormalize_wan_latents(latent, {.mean = info().channel_mean, .std = info().channel_std});
    if (normalization.scaling_factor != 1.0 || normalization.shift_factor != 0.0)
      z = wick::add(wick::div(z, normalization.scaling_factor), normalization.shift_factor);
    z = pixel_shuffle(z, patch_);
    return vae.decode(z.to(options_.device)).to(DType::F32).to(Device::cpu());
  }

  std::string path_;
  VaeLoadOptions options_;
  int64_t patch_;
  std::shared_ptr<AutoencoderKL> model_;
};

}  // namespace

VaeConfig flux2_vae_config() {
  VaeConfig c = ldm_vae_config(32, /*quant_convs=*/true);
  c.latent_patch = 2;
  return c;
}

std::unique_ptr<ImageVae> open_flux2_image_vae(const std::string& path, const ImageVaeOptions& options) {
  VaeLoadOptions load{.normalization = options.normalization,
                      .norm_groups = options.norm_groups,
                      .dtype = options.dtype,
                      .device = options.device};
  const LatentBatchNorm bn = read_latent_batch_norm(path);
  const VaeHeader header = read_vae_header(path, load);
  return std::make_unique<Flux2ImageVae>(path, std::move(load), header, bn);
}

}  // namespace wick::vae
