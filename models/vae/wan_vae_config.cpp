#include "models/vae/wan_vae_config.h"

#include "engine/autograd/grad_mode.h"
#include "engine/autograd/ops_elementwise.h"
#include "engine/autograd/ops_layout.h"
#include "runtime/error.h"

namespace wick::vae {
namespace {

// [1, C, 1, 1] (or [1, C, 1, 1, 1]) values rounded to f32 (as diffusers' pipelines hold them), in
// `like`'s dtype on its device, to broadcast over latents.
Tensor per_channel(const std::vector<double>& values, const Tensor& like) {
  std::vector<float> f(values.begin(), values.end());
  Shape shape(static_cast<size_t>(like.dim()), 1);
  shape[1] = static_cast<int64_t>(values.size());
  return autograd::to_dtype(Tensor::from_vector(f, shape, like.device()), like.dtype());
}

// f32 arithmetic, f64 for f64 latents.
DType math_dtype(const Tensor& z) { return z.dtype() == DType::F64 ? DType::F64 : DType::F32; }

void check_latents(const Tensor& z, const WanLatentNormalization& n, const char* what) {
  WICK_CHECK(z.defined() && is_floating(z.dtype()) && (z.dim() == 4 || z.dim() == 5), what,
             ": expected floating latents [B, C, h, w] or [B, C, T, h, w], got ",
             z.defined() ? z.describe() : std::string("an undefined tensor"));
  WICK_CHECK(n.mean.size() == n.std.size() && static_cast<int64_t>(n.mean.size()) == z.size(1), what, ": ",
             n.mean.size(), " means and ", n.std.size(), " stds for latents ", z.describe());
}

}  // namespace

WanLatentNormalization wan21_latent_normalization() {
  return {.mean = {-0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508, 0.4134, -0.0715, 0.5517,
                   -0.3632, -0.1922, -0.9497, 0.2503, -0.2921},
          .std = {2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743, 3.2687, 2.1526, 2.8652, 1.5579,
                  1.6382, 1.1253, 2.8251, 1.9160}};
}

Tensor normalize_wan_latents(const Tensor& z, const WanLatentNormalization& n) {
  check_latents(z, n, "normalize_wan_latents");
  autograd::NoGradGuard no_grad;
  Tensor x = autograd::to_dtype(z, math_dtype(z));
  return autograd::to_dtype((x - per_channel(n.mean, x)) / per_channel(n.std, x), z.dtype());
}

Tensor denormalize_wan_latents(const Tensor& x0, const WanLatentNormalization& n) {
  check_latents(x0, n, "denormalize_wan_latents");
  autograd::NoGradGuard no_grad;
  Tensor x = autograd::to_dtype(x0, math_dtype(x0));
  return autograd::to_dtype(x * per_channel(n.std, x) + per_channel(n.mean, x), x0.dtype());
}

void validate(const WanVaeConfig& c) {
  auto positive = [](int64_t value, const char* field) {
    WICK_CHECK_KIND(Config, value > 0, "Wan VAE config: ", field, " must be positive, got ", value);
  };
  positive(c.in_channels, "in_channels");
  positive(c.base_dim, "base_dim");
  positive(c.num_res_blocks, "num_res_blocks");
  positive(c.z_dim, "z_dim");
  WICK_CHECK_KIND(Config, c.dim_mult.size() >= 2 && c.dim_mult.size() <= 8,
                  "Wan VAE config: dim_mult must list 2 to 8 levels, got ", c.dim_mult.size());
  for (int64_t m : c.dim_mult) positive(m, "every dim_mult");
  WICK_CHECK_KIND(Config, c.temporal_downsample.size() + 1 == c.dim_mult.size(),
                  "Wan VAE config: temporal_downsample must have one entry per level but the last (",
                  c.dim_mult.size() - 1, "), got ", c.temporal_downsample.size());
  // The decoder's upsamplers halve the channels and the next level starts from that half.
  for (int64_t i = 1; i < c.n_levels(); ++i)
    WICK_CHECK_KIND(Config, c.channels(i) % 2 == 0, "Wan VAE config: level ", i, " has ", c.channels(i),
                    " channels, which the decoder's upsampler cannot halve");
  WICK_CHECK_KIND(Config,
                  c.normalization.mean.size() == c.normalization.std.size() &&
                      static_cast<int64_t>(c.normalization.mean.size()) == c.z_dim,
                  "Wan VAE config: latents_mean / latents_std must have z_dim = ", c.z_dim, " entries, got ",
                  c.normalization.mean.size(), " / ", c.normalization.std.size());
  for (double s : c.normalization.std) WICK_CHECK_KIND(Config, s != 0.0, "Wan VAE config: a latents_std entry is 0");
  WICK_CHECK_KIND(Config,
                  c.dtype == DType::F32 || c.dtype == DType::BF16 || c.dtype == DType::F16 || c.dtype == DType::F64,
                  "Wan VAE config: dtype must be floating, got ", dtype_name(c.dtype));
}

WanVaeConfig qwenimage_vae_config() { return WanVaeConfig{}; }

}  // namespace wick::vae
