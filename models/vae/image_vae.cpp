#include "models/vae/image_vae.h"

#include <utility>

#include "engine/autograd/grad_mode.h"
#include "models/vae/wan_vae.h"
#include "models/vae/wan_vae_weights.h"
#include "runtime/error.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/join.h"

namespace wick::vae {

VaeMoments ImageVae::encode(const Tensor& images, const VaeTiling& tiling) {
  WICK_CHECK_KIND(Usage, images.dim() == 4 && images.size(1) == 3,
                  "ImageVae::encode: images must be [B, 3, H, W], got ", images.describe());
  WICK_CHECK_KIND(Usage, images.size(2) % info_.downscale == 0 && images.size(3) % info_.downscale == 0,
                  "ImageVae::encode: image sides must be multiples of ", info_.downscale, ", got ", images.describe());
  return encode_loaded(images, tiling);
}

Tensor ImageVae::decode_to_images(const Tensor& latents, const LatentNormalization& normalization) {
  WICK_CHECK_KIND(Usage, latents.defined() && latents.dim() == 4 && is_floating(latents.dtype()) &&
                             latents.size(1) == info_.z_channels,
                  "ImageVae::decode_to_images: latents must be a floating [N, ", info_.z_channels, ", h, w] tensor, "
                  "got ", latents.defined() ? latents.describe() : "undefined");
  autograd::NoGradGuard no_grad;
  std::vector<Tensor> images;
  for (int64_t i = 0; i < latents.size(0); ++i) {
    const Tensor latent = latents.narrow(0, i, 1).to(Device::cpu()).to(DType::F32).contiguous();
    const Tensor pixels = decode_loaded(latent, normalization);
    images.push_back(wick::minimum(wick::maximum(wick::mul(wick::add(pixels, 1.0), 0.5), 0.0), 1.0));
  }
  if (images.empty())
    return Tensor::empty(
        {0, info_.image_channels, latents.size(2) * info_.downscale, latents.size(3) * info_.downscale}, DType::F32);
  return images.size() == 1 ? images.front().contiguous() : wick::concat(images, 0);
}

namespace {

// The AutoencoderKL: load_vae on the first encode, with the options read_vae_header resolved at open.
class KlImageVae final : public ImageVae {
 public:
  KlImageVae(std::string path, VaeLoadOptions options, const VaeHeader& header)
      : ImageVae({.z_channels = header.config.z_channels,
                  .downscale = header.config.downscale(),
                  .scaling_factor = header.config.normalization.scaling_factor,
                  .shift_factor = header.config.normalization.shift_factor,
                  .channel_mean = {},
                  .channel_std = {},
                  .source = header.source_path,
                  .tiling = true}),
        path_(std::move(path)),
        options_(std::move(options)) {}

  void unload() noexcept override { model_.reset(); }

 private:
  VaeMoments encode_loaded(const Tensor& images, const VaeTiling& tiling) override {
    if (!model_) model_ = load_vae(path_, options_).model;
    return model_->encode(images, tiling);
  }

  // As vae::decode_to_images (vae.h) does it.
  Tensor decode_loaded(const Tensor& latent, const LatentNormalization& normalization) override {
    if (!model_) model_ = load_vae(path_, options_).model;
    const Tensor z = denormalize_latents(latent, normalization);
    return model_->decode(z.to(options_.device)).to(DType::F32).to(Device::cpu());
  }

  std::string path_;
  VaeLoadOptions options_;
  std::shared_ptr<AutoencoderKL> model_;
};

// The Wan VAE: load_wan_vae on the first encode; 2-D images only, always untiled.
class WanImageVae final : public ImageVae {
 public:
  WanImageVae(std::string path, WanVaeLoadOptions options, const WanVaeHeader& header)
      : ImageVae({.z_channels = header.config.z_dim,
                  .downscale = header.config.downscale(),
                  .scaling_factor = 1.0,
                  .shift_factor = 0.0,
                  .channel_mean = header.config.normalization.mean,
                  .channel_std = header.config.normalization.std,
                  .source = header.source_path,
                  .tiling = false}),
        path_(std::move(path)),
        options_(std::move(options)) {}

  void unload() noexcept override { model_.reset(); }

 private:
  VaeMoments encode_loaded(const Tensor& images, const VaeTiling&) override {
    if (!model_) model_ = load_wan_vae(path_, options_).model;
    return model_->encode(images);
  }

  // As qwenimage_decode does it: the per-channel lists, then a dataset's scalar factors when they are not 1 and 0.
  Tensor decode_loaded(const Tensor& latent, const LatentNormalization& normalization) override {
    if (!model_) model_ = load_wan_vae(path_, options_).model;
    Tensor z = model_->denormalize(latent);
    if (normalization.scaling_factor != 1.0 || normalization.shift_factor != 0.0)
      z = wick::add(wick::div(z, normalization.scaling_factor), normalization.shift_factor);
    return model_->decode(z.to(options_.dtype).to(options_.device)).to(DType::F32).to(Device::cpu());
  }

  std::string path_;
  WanVaeLoadOptions options_;
  std::shared_ptr<WanVae> model_;
};

}  // namespace

std::unique_ptr<ImageVae> open_kl_image_vae(const std::string& path, const ImageVaeOptions& options) {
  VaeLoadOptions load{.normalization = options.normalization,
                      .norm_groups = options.norm_groups,
                      .dtype = options.dtype,
                      .device = options.device};
  const VaeHeader header = read_vae_header(path, load);
  return std::make_unique<KlImageVae>(path, std::move(load), header);
}

std::unique_ptr<ImageVae> open_wan_image_vae(const std::string& path, const ImageVaeOptions& options) {
  WanVaeLoadOptions load{.normalization = std::nullopt, .dtype = options.dtype, .device = options.device};
  const WanVaeHeader header = read_wan_vae_header(path, load);
  const size_t channels = static_cast<size_t>(header.config.z_dim);
  WICK_CHECK_KIND(
      Data, header.config.normalization.mean.size() == channels && header.config.normalization.std.size() == channels,
      header.source_path, ": the latent normalization has ", header.config.normalization.mean.size(), " means and ",
      header.config.normalization.std.size(), " stds for ", channels, " latent channels");
  return std::make_unique<WanImageVae>(path, std::move(load), header);
}

}  // namespace wick::vae
