#include "models/qwenimage/qwenimage_sampler.h"

#include <cmath>

#include "engine/autograd/grad_mode.h"
#include "models/diffusion/generate.h"
#include "models/diffusion/latent_image_sampler.h"
#include "models/diffusion/samplers.h"
#include "models/qwenimage/qwenimage_sequence.h"
#include "runtime/error.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/join.h"
#include "runtime/ops/reduce.h"

namespace wick::qwenimage {
namespace {

constexpr int64_t kLatentChannels = 16;  // the Qwen-Image VAE's z_dim
constexpr int64_t kVaeScale = 8;         // its downscale factor
constexpr int64_t kPatch = 2;            // the transformer's patch: images are multiples of 8 x 2 pixels

// np.linspace(1.0, 1 / steps, steps) in float64 (start + i·step, the last exactly the stop), cast to float32.
std::vector<float> unshifted_sigmas(int64_t steps) {
  const double start = 1.0, stop = 1.0 / static_cast<double>(steps);
  const double step = steps > 1 ? (stop - start) / static_cast<double>(steps - 1) : 0.0;
  std::vector<float> sigmas;
  for (int64_t i = 0; i < steps; ++i)
    sigmas.push_back(static_cast<float>(i + 1 == steps ? stop : static_cast<double>(i) * step + start));
  return sigmas;
}

// rows [B or 1, ...] as [batch, ...] (one row repeated); undefined stays undefined.
Tensor rows_for(const Tensor& rows, int64_t batch) {
  if (!rows.defined() || rows.size(0) == batch) return rows;
  Shape shape = rows.shape();
  shape[0] = batch;
  return rows.expand(shape).contiguous();
}

// The pipeline's true CFG on predictions [B, C, h, w]: comb = neg + s·(pos − neg), times ‖pos‖ / ‖comb‖ per packed
// token (the norm over its C·p·p features, torch.norm(dim=-1) of the packed predictions).
Tensor true_cfg(const Tensor& positive, const Tensor& negative, double scale, int64_t patch) {
  const Tensor pos = pack_latents(positive, patch), neg = pack_latents(negative, patch);
  const Tensor comb = add(neg, mul(sub(pos, neg), scale));
  const Tensor pos_norm = sqrt(sum(square(pos), {2}, true));
  const Tensor comb_norm = sqrt(sum(square(comb), {2}, true));
  return unpack_latents(mul(comb, div(pos_norm, comb_norm)), patch, positive.size(2), positive.size(3));
}

void check_text(const diffusion::Conditioning& text, const char* what, int64_t batch, bool one_row_allowed) {
  const Tensor& context = text.context;
  const Tensor& mask = text.context_mask;
  WICK_CHECK(context.dim() == 3 && is_floating(context.dtype()) &&
                 (context.size(0) == batch || (one_row_allowed && context.size(0) == 1)),
             "Qwen-Image sampler: ", what, " rows must be a floating [", batch, one_row_allowed ? " or 1" : "",
             ", L, text_dim] tensor, got ", context.describe());
  WICK_CHECK(!mask.defined() || (mask.dim() == 2 && mask.size(0) == context.size(0) && mask.size(1) == context.size(1)),
             "Qwen-Image sampler: the ", what, " mask must be [", context.size(0), ", ", context.size(1),
             "] like its rows ", context.describe(), ", got ", mask.describe());
}

}  // namespace

double qwenimage_mu(int64_t image_tokens, const QwenImageSchedule& s) {
  // calculate_shift, in its order of operations.
  const double m = (s.max_shift - s.base_shift) / static_cast<double>(s.max_image_seq_len - s.base_image_seq_len);
  const double b = s.base_shift - m * static_cast<double>(s.base_image_seq_len);
  return static_cast<double>(image_tokens) * m + b;
}

std::vector<double> qwenimage_sigmas(int64_t steps, int64_t image_tokens, const QwenImageSchedule& s) {
  WICK_CHECK_KIND(Config, steps >= 1, "Qwen-Image sampler: steps must be >= 1, got ", steps);
  WICK_CHECK_KIND(Config, image_tokens >= 1, "Qwen-Image sampler: image_tokens must be >= 1, got ", image_tokens);
  WICK_CHECK_KIND(Config, s.max_image_seq_len != s.base_image_seq_len && s.shift_terminal >= 0 && s.shift_terminal < 1,
                  "Qwen-Image sampler: the schedule needs max_image_seq_len != base_image_seq_len and shift_terminal "
                  "in [0, 1), got ",
                  s.base_image_seq_len, ", ", s.max_image_seq_len, " and ", s.shift_terminal);
  if (steps == 1) return {1.0, 0.0};
  // FlowMatchEulerDiscreteScheduler.set_timesteps on numpy float32 arrays: the Python floats (e^mu, 1 − terminal) are
  // rounded to float32 first, every operation is a float32 one; (1/σ − 1) ** 1.0 is exact.
  const auto e_mu = static_cast<float>(std::exp(qwenimage_mu(image_tokens, s)));
  std::vector<float> sigmas = unshifted_sigmas(steps);
  for (float& sigma : sigmas) sigma = e_mu / (e_mu + (1.0f / sigma - 1.0f));
  if (s.shift_terminal > 0) {
    const float scale = (1.0f - sigmas.back()) / static_cast<float>(1.0 - s.shift_terminal);
    for (float& sigma : sigmas) sigma = 1.0f - (1.0f - sigma) / scale;
  }
  std::vector<double> out(sigmas.begin(), sigmas.end());
  out.push_back(0.0);
  return out;
}

Tensor qwenimage_noise(int64_t first, int64_t n, int64_t height, int64_t width, uint64_t seed, Device device) {
  const int64_t multiple = kVaeScale * kPatch;
  WICK_CHECK_KIND(Config, height > 0 && width > 0 && height % multiple == 0 && width % multiple == 0,
                  "Qwen-Image images must be multiples of ", multiple, " pixels (the VAE's ", kVaeScale,
                  " x the 2 x 2 patches), got ", width, " x ", height);
  WICK_CHECK(first >= 0 && n >= 0, "qwenimage_noise: images ", first, " .. ", first + n - 1, " do not exist");
  return sample_noise({kLatentChannels, height / kVaeScale, width / kVaeScale}, first, n, seed, device);
}

Tensor qwenimage_denoise(QwenImageTransformer& model, const QwenImageText& text, const Tensor& noise,
                         const QwenImageSampling& settings) {
  const QwenImageConfig& c = model.config();
  WICK_CHECK(noise.defined() && noise.dim() == 4 && is_floating(noise.dtype()) && noise.size(1) == c.out_channels,
             "Qwen-Image sampler: noise must be a floating [B, ", c.out_channels, ", h, w] tensor, got ",
             noise.describe());
  WICK_CHECK_KIND(Config, settings.steps >= 1, "Qwen-Image sampler: steps must be >= 1, got ", settings.steps);
  WICK_CHECK_KIND(Config, std::isfinite(settings.true_cfg_scale) && settings.true_cfg_scale >= 0,
                  "Qwen-Image sampler: true_cfg_scale must be a number >= 0, got ", settings.true_cfg_scale);
  model.check_latent_size(noise.size(2), noise.size(3));
  const int64_t batch = noise.size(0);
  check_text(text.prompts, "prompt", batch, false);
  const bool cfg = settings.true_cfg_scale > 1 && text.negative.context.defined();
  if (cfg) check_text(text.negative, "negative prompt", batch, true);

  const Device device = device_of(model);
  EvalModeGuard eval_mode(model);
  autograd::NoGradGuard no_grad;
  auto on_device = [&](const diffusion::Conditioning& t) {
    return diffusion::Conditioning{.context = rows_for(t.context, batch).to(device),
                                   .context_mask = t.context_mask.defined() ? rows_for(t.context_mask, batch).to(device)
                                                                            : Tensor()};
  };
  const diffusion::Conditioning positive = on_device(text.prompts);
  const diffusion::Conditioning negative = cfg ? on_device(text.negative) : diffusion::Conditioning{};

  // The pipeline's loop: a forward on the prompts (and one on the negative prompt), true CFG, the Euler step.
  const diffusion::Denoiser forward = model_denoiser(model, NoiseScheduler::FlowMatch);
  const double scale = settings.true_cfg_scale;
  const int64_t patch = c.patch_size;
  const diffusion::Denoiser guided = [&](const Tensor& x, const Tensor& t, const diffusion::Conditioning& cond) {
    const Tensor v = forward(x, t, cond);
    return cfg ? true_cfg(v, forward(x, t, negative), scale, patch) : v;
  };
  diffusion::FlowSamplerConfig flow;
  flow.sigmas = qwenimage_sigmas(settings.steps, (noise.size(2) / patch) * (noise.size(3) / patch), settings.schedule);
  flow.n_steps = settings.steps;
  const Tensor x = noise.to(DType::F32).to(device).contiguous();
  return diffusion::sample_flow_euler(guided, x, positive, flow).to(Device::cpu());
}

Tensor qwenimage_decode(vae::WanVae& vae, const Tensor& latents) {
  const vae::WanVaeConfig& c = vae.config();
  WICK_CHECK(latents.defined() && latents.dim() == 4 && is_floating(latents.dtype()) && latents.size(1) == c.z_dim,
             "qwenimage_decode: latents must be a floating [B, ", c.z_dim, ", h, w] tensor, got ",
             latents.defined() ? latents.describe() : "undefined");
  autograd::NoGradGuard no_grad;
  std::vector<Tensor> images;
  for (int64_t i = 0; i < latents.size(0); ++i) {
    const Tensor z = vae.denormalize(latents.narrow(0, i, 1).to(DType::F32)).to(c.dtype).to(c.device);
    const Tensor pixels = vae.decode(z).to(DType::F32).to(Device::cpu());
    images.push_back(minimum(maximum(mul(add(pixels, 1.0), 0.5), 0.0), 1.0));
  }
  if (images.empty())
    return Tensor::empty({0, c.in_channels, latents.size(2) * c.downscale(), latents.size(3) * c.downscale()},
                         DType::F32);
  return images.size() == 1 ? images.front().contiguous() : concat(images, 0);
}

}  // namespace wick::qwenimage
