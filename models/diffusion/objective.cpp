#include "models/diffusion/objective.h"

#include <algorithm>

#include "engine/autograd/ops_layout.h"
#include "models/vae/vae.h"
#include "models/vae/wan_vae_config.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/philox.h"

namespace wick {
namespace {

constexpr int64_t kLatentToPixels = 8;  // every VAE of wick's models (SDXL's, SD3's, Flux's) halves 3 times

std::vector<uint64_t> as_unsigned(const std::vector<int64_t>& ids) {
  return std::vector<uint64_t>(ids.begin(), ids.end());
}

}  // namespace

diffusion::FlowMatchingConfig flow_matching_config(const TrainSection& t) {
  diffusion::FlowMatchingConfig flow;
  const bool logit_normal = t.timestep_sampling == TimestepSampling::LogitNormal ||
                            t.timestep_sampling == TimestepSampling::FluxShift ||
                            t.timestep_sampling == TimestepSampling::QwenShift;
  flow.sampling = logit_normal ? diffusion::SigmaSampling::LogitNormal : diffusion::SigmaSampling::Uniform;
  if (t.timestep_sampling == TimestepSampling::Mode) flow.sampling = diffusion::SigmaSampling::Mode;
  flow.mode_scale = t.mode_scale;
  flow.logit_mean = t.logit_mean;
  flow.logit_std = t.logit_std;
  flow.shift = t.timestep_shift != 1.0 ? diffusion::SigmaShift::Constant : diffusion::SigmaShift::None;
  if (t.timestep_sampling == TimestepSampling::FluxShift) flow.shift = diffusion::SigmaShift::Resolution;
  if (t.timestep_sampling == TimestepSampling::QwenShift) {
    // musubi-tuner's qwen_shift: the exponential shift with the μ of Qwen-Image's sampling schedule.
    flow.shift = diffusion::SigmaShift::Resolution;
    flow.max_shift = diffusion::kQwenMaxShift;
    flow.max_tokens = diffusion::kQwenMaxTokens;
  }
  flow.shift_value = t.timestep_shift;
  flow.noise_offset = t.noise_offset;
  return flow;
}

double flow_min_snr_weight(double sigma, double gamma) {
  const double one_minus = 1.0 - sigma;
  return std::min(one_minus * one_minus, gamma * sigma * sigma);
}

Objective::Objective(const TrainSection& train)
    : scheduler_(train.noise_scheduler),
      seed_(static_cast<uint64_t>(train.seed)),
      min_snr_gamma_(train.min_snr_gamma),
      flow_(flow_matching_config(train)),
      ddpm_schedule_(diffusion::DdpmSchedule::scaled_linear()) {
  ddpm_.min_snr_gamma = train.min_snr_gamma;
  ddpm_.noise_offset = train.noise_offset;
  ddpm_.v_prediction = train.prediction_type == PredictionType::V;
}

Tensor Objective::scale_latents(const Tensor& latents, const LatentDatasetAttributes& attributes) {
  Tensor x = latents.to(DType::F32);
  if (attributes.vae_shift_factor != 0.0) x = sub(x, attributes.vae_shift_factor);
  if (attributes.vae_scaling_factor != 1.0) x = mul(x, attributes.vae_scaling_factor);
  if (attributes.vae_latents_mean.empty() && attributes.vae_latents_std.empty()) return x;
  const std::vector<std::string> problems = latent_normalization_problems(attributes);
  WICK_CHECK_KIND(Data, problems.empty(), "scale_latents: the dataset's ", problems.empty() ? "" : problems.front());
  WICK_CHECK_KIND(Data, latents.dim() == 4 && latents.size(1) == attributes.latent_channels, "scale_latents: latents ",
                  latents.describe(), " do not have the dataset's ", attributes.latent_channels, " channels");
  return vae::normalize_wan_latents(x, {.mean = attributes.vae_latents_mean, .std = attributes.vae_latents_std});
}

ObjectiveBatch Objective::make(const Tensor& x0, const std::vector<int64_t>& ids, int64_t epoch) const {
  WICK_CHECK(x0.dim() == 4 && x0.size(0) == static_cast<int64_t>(ids.size()), "Objective: latents ", x0.describe(),
             " do not match ", ids.size(), " sample ids");
  const auto e = static_cast<uint64_t>(epoch);
  ObjectiveBatch out;
  if (scheduler_ == NoiseScheduler::FlowMatch) {
    diffusion::FlowMatchingBatch b = diffusion::make_flow_batch(x0, as_unsigned(ids), e, seed_, flow_);
    out.x_t = b.x_t;
    out.model_time = b.sigma;
    out.target = b.target;
    if (min_snr_gamma_ > 0.0) {
      std::vector<float> sigmas = b.sigma.to_vector<float>(), weights(sigmas.size());
      for (size_t i = 0; i < sigmas.size(); ++i)
        weights[i] = static_cast<float>(flow_min_snr_weight(sigmas[i], min_snr_gamma_));
      out.weights = Tensor::from_vector<float>(weights, {static_cast<int64_t>(weights.size())}, x0.device());
    }
    return out;
  }
  diffusion::DdpmBatch b = diffusion::make_ddpm_batch(x0, as_unsigned(ids), e, seed_, ddpm_schedule_, ddpm_);
  out.x_t = b.x_t;
  out.model_time = div(b.timesteps, 1000.0);
  out.target = b.target;
  if (min_snr_gamma_ > 0.0) out.weights = b.weights;
  return out;
}

Tensor Objective::loss(const Tensor& pred, const ObjectiveBatch& batch) const {
  Tensor p = pred.dtype() == DType::F32 ? pred : autograd::to_dtype(pred, DType::F32);
  return diffusion::flow_matching_loss(p, batch.target, batch.weights);
}

diffusion::Conditioning drop_captions(const Batch& batch, double p, uint64_t seed, int64_t epoch) {
  diffusion::Conditioning cond{batch.text_embeds, batch.text_mask, batch.text_pooled};
  cond.size_ids = size_conditioning(batch);
  if (p <= 0.0) return cond;
  const auto n = static_cast<int64_t>(batch.ids.size());
  std::vector<float> keep(static_cast<size_t>(n));
  bool any_dropped = false;
  for (int64_t i = 0; i < n; ++i) {
    RngStream s = derive_stream(seed, static_cast<uint64_t>(batch.ids[i]), static_cast<uint64_t>(epoch),
                                RngPurpose::CaptionDropout);
    keep[i] = stream_uniform(s, 0) < p ? 0.0f : 1.0f;
    any_dropped = any_dropped || keep[i] == 0.0f;
  }
  if (!any_dropped) return cond;
  const Device device = batch.text_embeds.device();
  Tensor keep_t = Tensor::from_vector<float>(keep, {n}, device);
  cond.context = mul(batch.text_embeds, keep_t.view({n, 1, 1}));
  cond.pooled = mul(batch.text_pooled, keep_t.view({n, 1}));
  cond.context_mask = mul(batch.text_mask.to(DType::F32), keep_t.view({n, 1})).to(DType::U8);
  return cond;
}

Tensor size_conditioning(const Batch& batch) {
  if (!batch.original_size.defined()) return Tensor();
  const auto n = static_cast<int64_t>(batch.ids.size());
  WICK_CHECK(batch.latents.dim() == 4 && batch.latents.size(0) == n, "size_conditioning: latents ",
             batch.latents.describe(), " for ", n, " samples");
  const bool crop_fits = !batch.crop.defined() || batch.crop.shape() == Shape({n, 2});
  WICK_CHECK(batch.original_size.shape() == Shape({n, 2}) && crop_fits,
             "size_conditioning: original_size ", batch.original_size.describe(), " and crop ",
             batch.crop.defined() ? batch.crop.describe() : std::string("(none)"), " are not [", n, ", 2]");
  const std::vector<int64_t> original = batch.original_size.to(DType::I64).to_vector<int64_t>();
  const std::vector<int64_t> crop =
      batch.crop.defined() ? batch.crop.to(DType::I64).to_vector<int64_t>() : std::vector<int64_t>(original.size(), 0);
  const auto target_h = static_cast<float>(batch.latents.size(2) * kLatentToPixels);
  const auto target_w = static_cast<float>(batch.latents.size(3) * kLatentToPixels);
  std::vector<float> rows;
  for (size_t i = 0; i < static_cast<size_t>(n); ++i)
    rows.insert(rows.end(), {static_cast<float>(original[2 * i]), static_cast<float>(original[2 * i + 1]),
                             static_cast<float>(crop[2 * i]), static_cast<float>(crop[2 * i + 1]), target_h, target_w});
  return Tensor::from_vector<float>(rows, {n, 6}, batch.latents.device());
}

Tensor training_latents(const Batch& batch, LatentSampling sampling, uint64_t seed, int64_t epoch) {
  if (!batch.latents_logvar.defined() || sampling == LatentSampling::Mean) return batch.latents;
  std::vector<RngStream> streams;
  for (int64_t id : batch.ids)
    streams.push_back(derive_stream(seed, static_cast<uint64_t>(id), static_cast<uint64_t>(epoch), RngPurpose::LatentSample));
  return vae::sample_latents({.mean = batch.latents, .logvar = batch.latents_logvar}, streams);
}

}  // namespace wick
