#include "models/vae/vae.h"

#include "engine/autograd/grad_mode.h"
#include "engine/autograd/ops_elementwise.h"
#include "engine/autograd/ops_join.h"
#include "engine/autograd/ops_layout.h"
#include "models/nn/conv.h"
#include "runtime/error.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/join.h"
#include "runtime/ops/random.h"

namespace wick::vae {
namespace {

constexpr double kLogvarMin = -30.0, kLogvarMax = 20.0;

std::shared_ptr<nn::Conv2d> pointwise(const VaeConfig& c, int64_t channels) {
  return std::make_shared<nn::Conv2d>(channels, channels, 1,
                                      nn::Conv2dOptions{.stride = 1,
                                                        .padding = 0,
                                                        .dilation = 1,
                                                        .groups = 1,
                                                        .bias = true,
                                                        .dtype = c.dtype,
                                                        .device = c.device,
                                                        .trainable = false,
                                                        .initialize = c.initialize});
}

}  // namespace

AutoencoderKL::AutoencoderKL(VaeConfig config) : config_(std::move(config)) {
  validate(config_);
  register_module("encoder", std::make_shared<VaeEncoder>(config_));
  register_module("decoder", std::make_shared<VaeDecoder>(config_));
  if (config_.quant_conv) register_module("quant_conv", pointwise(config_, 2 * config_.z_channels));
  if (config_.post_quant_conv) register_module("post_quant_conv", pointwise(config_, config_.z_channels));
  if (config_.latent_patch > 0) register_module("bn", std::make_shared<VaeLatentBatchNorm>(config_));
  set_all_trainable(false);
  eval();
}

TileGrid AutoencoderKL::grid(const VaeTiling& tiling, bool encoding) const {
  const int64_t f = config_.downscale();
  WICK_CHECK(tiling.tile_size >= 0 && tiling.tile_size % f == 0, "VAE tiling: tile_size ", tiling.tile_size,
             " must be 0 (no tiling) or a positive multiple of the downscale factor ", f);
  const int64_t overlap = tiling.overlap < 0 ? tiling.tile_size / 4 : tiling.overlap;
  WICK_CHECK(tiling.tile_size == 0 || overlap < tiling.tile_size, "VAE tiling: overlap ", overlap,
             " must be below tile_size ", tiling.tile_size);
  if (encoding)  // image pixels in, latent pixels out; tiles start on latent pixels
    return TileGrid{.tile = tiling.tile_size, .overlap = overlap, .align = f, .scale_num = 1, .scale_den = f};
  return TileGrid{
      .tile = tiling.tile_size / f, .overlap = (overlap + f - 1) / f, .align = 1, .scale_num = f, .scale_den = 1};
}

VaeMoments AutoencoderKL::encode(const Tensor& images, const VaeTiling& tiling) {
  const VaeConfig& c = config_;
  WICK_CHECK(images.defined() && images.dim() == 4 && images.size(1) == c.in_channels && is_floating(images.dtype()),
             "VAE encode: expected floating images [B, ", c.in_channels, ", H, W], got ",
             images.defined() ? images.describe() : std::string("an undefined tensor"));
  const int64_t f = c.downscale();
  WICK_CHECK(images.size(0) > 0 && images.size(2) >= f && images.size(3) >= f, "VAE encode: images ", images.describe(),
             " must be at least ", f, " x ", f, " pixels");
  const TileGrid tiles = grid(tiling, /*encoding=*/true);  // checks the tiling even when the image fits a tile
  autograd::NoGradGuard no_grad;
  Tensor x = autograd::to_dtype(autograd::to_device(images, c.device), c.dtype);
  Module& encoder = *child("encoder");
  auto moments_of = [&](const Tensor& tile) {
    Tensor moments = encoder.forward(tile);
    if (auto quant = child("quant_conv")) moments = quant->forward(moments);
    return moments;
  };
  Tensor moments;
  if (tiling.tile_size > 0 && (x.size(2) > tiling.tile_size || x.size(3) > tiling.tile_size)) {
    WICK_CHECK(x.size(2) % f == 0 && x.size(3) % f == 0, "VAE encode: tiled images must be multiples of ", f,
               " pixels, got ", images.describe());
    moments = tiled_apply(x, tiles, moments_of);
  } else {
    moments = moments_of(x);
  }
  x = Tensor();
  VaeMoments out;
  out.mean = autograd::contiguous(autograd::narrow(moments, 1, 0, c.z_channels));
  out.logvar = autograd::minimum(
      autograd::maximum(autograd::narrow(moments, 1, c.z_channels, c.z_channels), kLogvarMin), kLogvarMax);
  return out;
}

Tensor AutoencoderKL::decode(const Tensor& z, const VaeTiling& tiling) {
  const VaeConfig& c = config_;
  WICK_CHECK(z.defined() && z.dim() == 4 && z.size(1) == c.z_channels && z.size(0) > 0 && z.size(2) > 0 &&
                 z.size(3) > 0 && is_floating(z.dtype()),
             "VAE decode: expected floating latents [B, ", c.z_channels, ", h, w], got ",
             z.defined() ? z.describe() : std::string("an undefined tensor"));
  const TileGrid tiles = grid(tiling, /*encoding=*/false);
  autograd::NoGradGuard no_grad;
  Tensor h = autograd::to_dtype(autograd::to_device(z, c.device), c.dtype);
  if (auto post_quant = child("post_quant_conv")) h = post_quant->forward(h);  // 1x1: whole, before tiling
  Module& decoder = *child("decoder");
  const int64_t f = c.downscale();
  if (tiling.tile_size > 0 && (h.size(2) * f > tiling.tile_size || h.size(3) * f > tiling.tile_size))
    return tiled_apply(h, tiles, [&](const Tensor& tile) { return decoder.forward(tile); });
  return decoder.forward(h);
}

Tensor AutoencoderKL::normalize(const Tensor& z) const { return normalize_latents(z, config_.normalization); }

Tensor AutoencoderKL::denormalize(const Tensor& latents) const {
  return denormalize_latents(latents, config_.normalization);
}

void AutoencoderKL::set_normalization(const LatentNormalization& normalization) {
  WICK_CHECK_KIND(Config, normalization.scaling_factor != 0.0, "VAE: scaling_factor must not be 0");
  config_.normalization = normalization;
}

Tensor sample_latents(const VaeMoments& m, const RngStream& stream, uint64_t offset) {
  WICK_CHECK(m.mean.defined() && m.logvar.defined() && m.mean.shape() == m.logvar.shape(),
             "sample_latents: mean and logvar must have one shape, got ",
             m.mean.defined() ? m.mean.describe() : "undefined", " and ",
             m.logvar.defined() ? m.logvar.describe() : "undefined");
  autograd::NoGradGuard no_grad;
  Tensor noise = randn(m.mean.shape(), stream, DType::F32, m.mean.device(), offset);
  Tensor std = autograd::exp(autograd::to_dtype(m.logvar, DType::F32) * 0.5);
  return autograd::to_dtype(autograd::to_dtype(m.mean, DType::F32) + std * noise, m.mean.dtype());
}

Tensor sample_latents(const VaeMoments& m, const std::vector<RngStream>& per_sample) {
  WICK_CHECK(m.mean.defined() && m.mean.dim() >= 1 && static_cast<int64_t>(per_sample.size()) == m.mean.size(0),
             "sample_latents: ", per_sample.size(), " streams for latents ",
             m.mean.defined() ? m.mean.describe() : "undefined", " (one per batch row)");
  std::vector<Tensor> rows;
  for (size_t b = 0; b < per_sample.size(); ++b) {
    const int64_t row = static_cast<int64_t>(b);
    VaeMoments one{.mean = m.mean.narrow(0, row, 1), .logvar = m.logvar.narrow(0, row, 1)};
    rows.push_back(sample_latents(one, per_sample[b]));
  }
  autograd::NoGradGuard no_grad;
  return autograd::concat(rows, 0);
}

Tensor decode_to_images(AutoencoderKL& model, const Tensor& latents, const LatentNormalization& normalization,
                        Device device) {
  std::vector<Tensor> images;
  for (int64_t i = 0; i < latents.size(0); ++i) {
    Tensor z = denormalize_latents(latents.narrow(0, i, 1), normalization);
    Tensor pixels = model.decode(z.to(device)).to(DType::F32).to(Device::cpu());
    images.push_back(wick::minimum(wick::maximum(wick::mul(wick::add(pixels, 1.0), 0.5), 0.0), 1.0));
  }
  return images.size() == 1 ? images.front().contiguous() : wick::concat(images, 0);
}

}  // namespace wick::vae
