#include "models/vae/wan_vae.h"

#include "engine/autograd/grad_mode.h"
#include "engine/autograd/ops_elementwise.h"
#include "engine/autograd/ops_layout.h"
#include "runtime/error.h"

namespace wick::vae {
namespace {

constexpr double kLogvarMin = -30.0, kLogvarMax = 20.0;

// [B, C, H, W] as it is, [B, C, 1, H, W] without its frame axis; anything else is an error.
Tensor single_frame(const Tensor& x, int64_t channels, const char* what) {
  WICK_CHECK(x.defined() && is_floating(x.dtype()) && (x.dim() == 4 || x.dim() == 5) && x.size(1) == channels, what,
             ": expected floating [B, ", channels, ", H, W] or [B, ", channels, ", 1, H, W], got ",
             x.defined() ? x.describe() : std::string("an undefined tensor"));
  if (x.dim() == 4) return x;
  WICK_CHECK(x.size(2) == 1, what, ": ", x.describe(), " has ", x.size(2),
             " frames; only single images (T = 1) are implemented");
  return autograd::squeeze(x, 2);
}

Tensor like_input(const Tensor& y, const Tensor& input) { return input.dim() == 5 ? autograd::unsqueeze(y, 2) : y; }

}  // namespace

WanVae::WanVae(WanVaeConfig config) : config_(std::move(config)) {
  validate(config_);
  const WanVaeConfig& c = config_;
  register_module("encoder", std::make_shared<WanEncoder>(c));
  register_module("decoder", std::make_shared<WanDecoder>(c));
  register_module("conv1", std::make_shared<WanCausalConv3d>(c, 2 * c.z_dim, 2 * c.z_dim, 1, 1, 0));
  register_module("conv2", std::make_shared<WanCausalConv3d>(c, c.z_dim, c.z_dim, 1, 1, 0));
  set_all_trainable(false);
  eval();
}

VaeMoments WanVae::encode(const Tensor& images) {
  const WanVaeConfig& c = config_;
  Tensor frames = single_frame(images, c.in_channels, "Wan VAE encode");
  const int64_t f = c.downscale();
  WICK_CHECK(frames.size(0) > 0 && frames.size(2) >= f && frames.size(3) >= f, "Wan VAE encode: images ",
             images.describe(), " must be at least ", f, " x ", f, " pixels");
  autograd::NoGradGuard no_grad;
  Tensor x = autograd::to_dtype(autograd::to_device(frames, c.device), c.dtype);
  Tensor moments = child("conv1")->forward(child("encoder")->forward(x));
  x = Tensor();
  VaeMoments out;
  out.mean = like_input(autograd::contiguous(autograd::narrow(moments, 1, 0, c.z_dim)), images);
  out.logvar = like_input(
      autograd::minimum(autograd::maximum(autograd::narrow(moments, 1, c.z_dim, c.z_dim), kLogvarMin), kLogvarMax),
      images);
  return out;
}

Tensor WanVae::decode(const Tensor& z) {
  const WanVaeConfig& c = config_;
  Tensor latents = single_frame(z, c.z_dim, "Wan VAE decode");
  autograd::NoGradGuard no_grad;
  Tensor h = autograd::to_dtype(autograd::to_device(latents, c.device), c.dtype);
  h = child("decoder")->forward(child("conv2")->forward(h));
  return like_input(autograd::minimum(autograd::maximum(h, -1.0), 1.0), z);
}

Tensor WanVae::normalize(const Tensor& z) const { return normalize_wan_latents(z, config_.normalization); }

Tensor WanVae::denormalize(const Tensor& x0) const { return denormalize_wan_latents(x0, config_.normalization); }

}  // namespace wick::vae
