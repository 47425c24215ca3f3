// Diffusion objectives and samplers: formulas against float64 hand computations, Philox determinism
// per sample id, σ statistics, schedule constants, and samplers that must recover a point-mass data
// distribution exactly when given the exact denoiser.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/autograd/backward.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "models/diffusion/ddpm.h"
#include "models/diffusion/flow_matching.h"
#include "models/diffusion/objective.h"
#include "models/diffusion/samplers.h"
#include "runtime/error.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/random.h"
#include "runtime/philox.h"

namespace wick::diffusion {
namespace {

using ::testing::HasSubstr;

Tensor test_input(const Shape& shape, uint64_t seed, DType dtype = DType::F64) {
  return randn(shape, derive_stream(seed, 0, 0, RngPurpose::Test), dtype);
}

std::vector<double> values(const Tensor& t) { return t.contiguous().to_vector<double>(); }

double sigmoid_d(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// ---- rectified flow ----

TEST(DiffusionFlow, InterpolationAndTargetMatchFloat64HandComputation) {
  const Shape shape{3, 2, 4, 5};
  Tensor x0 = test_input(shape, 11);
  std::vector<uint64_t> ids{17, 4, 250};
  const uint64_t epoch = 2, seed = 1234;
  FlowMatchingConfig cfg;
  cfg.logit_mean = 0.25;
  cfg.logit_std = 0.8;
  FlowMatchingBatch b = make_flow_batch(x0, ids, epoch, seed, cfg);
  ASSERT_EQ(b.x_t.shape(), shape);
  ASSERT_EQ(b.target.shape(), shape);
  ASSERT_EQ(b.sigma.dtype(), DType::F32);
  ASSERT_EQ(b.sigma.shape(), Shape{3});
  std::vector<double> xv = values(x0), xt = values(b.x_t), tg = values(b.target), sg = values(b.sigma);
  const int64_t per = 2 * 4 * 5;
  for (size_t i = 0; i < ids.size(); ++i) {
    // σ by hand from the Timestep stream.
    RngStream ts = derive_stream(seed, ids[i], epoch, RngPurpose::Timestep);
    double sigma = sigmoid_d(0.25 + 0.8 * static_cast<double>(stream_normal(ts, 0)));
    EXPECT_NEAR(sg[i], sigma, 1e-7) << "sample " << i;
    double s = static_cast<double>(static_cast<float>(sigma));
    RngStream ns = derive_stream(seed, ids[i], epoch, RngPurpose::Noise);
    for (int64_t j = 0; j < per; ++j) {
      size_t k = i * per + static_cast<size_t>(j);
      double eps = static_cast<double>(stream_normal(ns, static_cast<uint64_t>(j)));
      EXPECT_NEAR(xt[k], (1.0 - s) * xv[k] + s * eps, 1e-12) << k;
      EXPECT_NEAR(tg[k], eps - xv[k], 1e-12) << k;
    }
  }
}

TEST(DiffusionFlow, NoiseOffsetAddsOnePerChannelDraw) {
  Tensor x0 = test_input({2, 3, 2, 2}, 5);
  FlowMatchingConfig cfg;
  cfg.noise_offset = 0.1;
  FlowMatchingBatch b = make_flow_batch(x0, {8, 9}, 0, 77, cfg);
  std::vector<double> eps = values(b.noise);
  for (size_t i = 0; i < 2; ++i) {
    RngStream ns = derive_stream(77, 8 + i, 0, RngPurpose::Noise);
    for (int64_t c = 0; c < 3; ++c) {
      double off = 0.1 * static_cast<double>(stream_normal(ns, 12 + static_cast<uint64_t>(c)));
      for (int64_t p = 0; p < 4; ++p) {
        uint64_t j = static_cast<uint64_t>(c * 4 + p);
        EXPECT_NEAR(eps[i * 12 + j], static_cast<double>(stream_normal(ns, j)) + off, 1e-6);
      }
    }
  }
}

TEST(DiffusionFlow, LogitNormalSigmaStatistics) {
  FlowMatchingConfig cfg;
  cfg.logit_mean = 0.3;
  cfg.logit_std = 1.2;
  const int n = 100000;
  double sum = 0.0, sum_sq = 0.0;
  for (int i = 0; i < n; ++i) {
    double s = sample_raw_sigma(99, static_cast<uint64_t>(i), 0, cfg);
    ASSERT_GT(s, 0.0);
    ASSERT_LT(s, 1.0);
    double l = std::log(s / (1.0 - s));
    sum += l;
    sum_sq += l * l;
  }
  double mean = sum / n, var = sum_sq / n - mean * mean;
  EXPECT_NEAR(mean, 0.3, 5.0 * 1.2 / std::sqrt(n));
  // sd of the variance estimate of a normal: σ²·√(2/n)
  EXPECT_NEAR(var, 1.44, 5.0 * 1.44 * std::sqrt(2.0 / n));

  cfg.sampling = SigmaSampling::Uniform;
  double usum = 0.0;
  for (int i = 0; i < n; ++i) usum += sample_raw_sigma(99, static_cast<uint64_t>(i), 0, cfg);
  EXPECT_NEAR(usum / n, 0.5, 5.0 * std::sqrt(1.0 / 12.0) / std::sqrt(n));
}

// SD3's "mode" density (Esser et al. 2024, §3.1; diffusers' and kohya's weighting_scheme "mode"): σ = 1 − u −
// s·(cos²(πu/2) − 1 + u) from the same uniform stream; symmetric about 0.5, heavier in the middle for s > 0, and
// 1 − u (uniform) at s = 0.
TEST(DiffusionFlow, ModeDensityIsTheSd3PapersMap) {
  FlowMatchingConfig mode{.sampling = SigmaSampling::Mode, .mode_scale = 1.29};
  FlowMatchingConfig uniform{.sampling = SigmaSampling::Uniform};
  const int n = 20000;
  double sum = 0.0;
  int middle = 0;
  for (int i = 0; i < n; ++i) {
    const double u = sample_raw_sigma(7, static_cast<uint64_t>(i), 0, uniform);
    const double c = std::cos(3.14159265358979 * u / 2.0);
    const double sigma = sample_raw_sigma(7, static_cast<uint64_t>(i), 0, mode);
    EXPECT_NEAR(sigma, 1.0 - u - 1.29 * (c * c - 1.0 + u), 1e-12);
    sum += sigma;
    middle += sigma > 0.25 && sigma < 0.75;
  }
  EXPECT_NEAR(sum / n, 0.5, 0.01);
  EXPECT_GT(static_cast<double>(middle) / n, 0.6);  // uniform: 0.5
  mode.mode_scale = 0.0;
  EXPECT_NEAR(sample_raw_sigma(7, 3, 0, mode), 1.0 - sample_raw_sigma(7, 3, 0, uniform), 1e-12);
  // From a config (kohya's spelling): weighting_scheme mode, mode_scale, training_shift.
  TrainSection t;
  t.timestep_sampling = TimestepSampling::Mode;
  t.mode_scale = 0.5;
  t.timestep_shift = 3.0;
  FlowMatchingConfig from_config = flow_matching_config(t);
  EXPECT_EQ(from_config.sampling, SigmaSampling::Mode);
  EXPECT_EQ(from_config.mode_scale, 0.5);
  EXPECT_EQ(from_config.shift, SigmaShift::Constant);
}

TEST(DiffusionFlow, ShiftFormulasAtHandValues) {
  EXPECT_DOUBLE_EQ(sd3_shift(0.5, 3.0), 0.75);
  EXPECT_DOUBLE_EQ(sd3_shift(0.25, 3.0), 0.5);  // 0.75 / 1.5
  EXPECT_DOUBLE_EQ(sd3_shift(0.0, 3.0), 0.0);
  EXPECT_DOUBLE_EQ(sd3_shift(1.0, 3.0), 1.0);
  EXPECT_DOUBLE_EQ(sd3_shift(0.3, 1.0), 0.3);
  EXPECT_NEAR(flux_mu(256), 0.5, 1e-15);
  EXPECT_NEAR(flux_mu(4096), 1.15, 1e-15);
  EXPECT_NEAR(flux_mu(1024), 0.63, 1e-15);  // 0.5 + 0.65·768/3840
  EXPECT_NEAR(flux_shift(0.5, 1.15), sigmoid_d(1.15), 1e-15);
  EXPECT_NEAR(flux_shift(0.2, 0.0), 0.2, 1e-15);
  EXPECT_NEAR(flux_shift(0.2, std::log(3.0)), sd3_shift(0.2, 3.0), 1e-15);  // e^μ = s: the same map
  EXPECT_DOUBLE_EQ(flux_shift(0.0, 1.0), 0.0);
  EXPECT_NEAR(flux_shift(1.0, 1.0), 1.0, 1e-15);

  // make_flow_batch applies the shifts: Flux tokens from [B, C, 64, 64] latents = 32·32 = 1024.
  Tensor x0 = test_input({2, 4, 64, 64}, 3, DType::F32);
  FlowMatchingConfig cfg;
  cfg.shift = SigmaShift::Resolution;
  std::vector<double> sg = values(make_flow_batch(x0, {1, 2}, 0, 5, cfg).sigma);
  cfg.shift = SigmaShift::Constant;
  std::vector<double> sg3 = values(make_flow_batch(x0, {1, 2}, 0, 5, cfg).sigma);
  for (size_t i = 0; i < 2; ++i) {
    double raw = sample_raw_sigma(5, i + 1, 0, cfg);
    EXPECT_NEAR(sg[i], flux_shift(raw, 0.63), 1e-7);
    EXPECT_NEAR(sg3[i], sd3_shift(raw, 3.0), 1e-7);
  }

  // train.timestep_sampling qwen_shift (musubi-tuner's): logit-normal σ, then the exponential shift with Qwen-Image's
  // μ line, 0.5 at 256 tokens and 0.9 at 8192 (its sampling schedule's calculate_shift): 1024 tokens give
  // 0.5 + 0.4·768/7936.
  TrainSection qwen;
  qwen.timestep_sampling = TimestepSampling::QwenShift;
  const FlowMatchingConfig qcfg = flow_matching_config(qwen);
  EXPECT_EQ(qcfg.sampling, SigmaSampling::LogitNormal);
  EXPECT_EQ(qcfg.shift, SigmaShift::Resolution);
  const double qwen_mu = 0.5 + 0.4 * 768.0 / 7936.0;
  EXPECT_NEAR(flux_mu(1024, qcfg.base_shift, qcfg.max_shift, qcfg.base_tokens, qcfg.max_tokens), qwen_mu, 1e-15);
  EXPECT_NEAR(flux_mu(8192, qcfg.base_shift, qcfg.max_shift, qcfg.base_tokens, qcfg.max_tokens), 0.9, 1e-15);
  std::vector<double> sq = values(make_flow_batch(x0, {1, 2}, 0, 5, qcfg).sigma);
  for (size_t i = 0; i < 2; ++i)
    EXPECT_NEAR(sq[i], flux_shift(sample_raw_sigma(5, i + 1, 0, qcfg), qwen_mu), 1e-7);
}

TEST(DiffusionFlow, PerSampleDrawsDoNotDependOnBatchOrPosition) {
  Tensor xa = test_input({3, 2, 3, 3}, 21, DType::F32);
  Tensor xb = test_input({4, 2, 3, 3}, 22, DType::F32);
  FlowMatchingConfig cfg;
  cfg.noise_offset = 0.05;
  FlowMatchingBatch a = make_flow_batch(xa, {5, 7, 9}, 3, 42, cfg);
  FlowMatchingBatch b = make_flow_batch(xb, {9, 1, 2, 5}, 3, 42, cfg);
  auto row = [](const Tensor& t, int64_t i) { return values(t.select(0, i)); };
  EXPECT_EQ(row(a.noise, 0), row(b.noise, 3));  // sample 5
  EXPECT_EQ(row(a.noise, 2), row(b.noise, 0));  // sample 9
  EXPECT_EQ(row(a.sigma, 0), row(b.sigma, 3));
  EXPECT_EQ(row(a.sigma, 2), row(b.sigma, 0));
  EXPECT_NE(row(a.noise, 0), row(a.noise, 1));
  // Another epoch or seed draws anew.
  FlowMatchingBatch c = make_flow_batch(xa, {5, 7, 9}, 4, 42, cfg);
  FlowMatchingBatch d = make_flow_batch(xa, {5, 7, 9}, 3, 43, cfg);
  EXPECT_NE(row(a.noise, 0), row(c.noise, 0));
  EXPECT_NE(row(a.noise, 0), row(d.noise, 0));
  EXPECT_NE(row(a.sigma, 0), row(c.sigma, 0));
}

TEST(DiffusionFlow, WeightedLossValueAndGradient) {
  Tensor target = test_input({2, 3}, 31);
  Tensor pred = test_input({2, 3}, 32);
  autograd::set_requires_grad(pred, true);
  Tensor w = Tensor::from_vector<float>({0.5f, 2.0f}, {2});
  Tensor loss = flow_matching_loss(pred, target, w);
  std::vector<double> p = values(pred), t = values(target);
  double expect = 0.0;
  for (size_t k = 0; k < 6; ++k) expect += (k < 3 ? 0.5 : 2.0) * (p[k] - t[k]) * (p[k] - t[k]);
  EXPECT_NEAR(loss.item(), expect / 6.0, 1e-12);
  std::vector<double> g = values(autograd::backward(loss).get(pred));
  for (size_t k = 0; k < 6; ++k) EXPECT_NEAR(g[k], (k < 3 ? 0.5 : 2.0) * 2.0 * (p[k] - t[k]) / 6.0, 1e-12);
  // Unweighted = plain MSE.
  Tensor plain = flow_matching_loss(pred, target);
  double mse = 0.0;
  for (size_t k = 0; k < 6; ++k) mse += (p[k] - t[k]) * (p[k] - t[k]);
  EXPECT_NEAR(plain.item(), mse / 6.0, 1e-12);
}

TEST(DiffusionFlow, BadInputsThrow) {
  Tensor x0 = test_input({2, 3}, 1);
  try {
    make_flow_batch(x0, {1}, 0, 0);
    FAIL() << "no throw";
  } catch (const WickError& e) {
    EXPECT_THAT(e.what(), HasSubstr("make_flow_batch"));
  }
  FlowMatchingConfig cfg;
  cfg.shift = SigmaShift::Resolution;  // needs [B, C, H, W] or image_tokens
  EXPECT_THROW(make_flow_batch(x0, {1, 2}, 0, 0, cfg), WickError);
  cfg.image_tokens = 1024;
  EXPECT_NO_THROW(make_flow_batch(x0, {1, 2}, 0, 0, cfg));
}

// ---- DDPM ----

TEST(DiffusionDdpm, ScaledLinearScheduleMatchesDoubleComputation) {
  DdpmSchedule s = DdpmSchedule::scaled_linear();
  ASSERT_EQ(s.n_steps(), 1000);
  double prod = 1.0;
  for (int t = 0; t < 1000; ++t) {
    double r = std::sqrt(0.00085) + (std::sqrt(0.012) - std::sqrt(0.00085)) * t / 999.0;
    prod *= 1.0 - r * r;
    if (t == 0 || t == 500 || t == 999) {
      EXPECT_NEAR(s.alphas_cumprod[static_cast<size_t>(t)], prod, 1e-15 * prod + 1e-18);
    }
  }
  EXPECT_NEAR(s.alphas_cumprod[0], 0.99915, 1e-15);
  EXPECT_NEAR(s.betas[999], 0.012, 1e-15);
  EXPECT_NEAR(s.alphas_cumprod[999], 0.0047, 1e-4);  // diffusers' SDXL schedule: ≈ 0.00466
}

TEST(DiffusionDdpm, MinSnrWeights) {
  DdpmSchedule s = DdpmSchedule::scaled_linear();
  std::vector<double> w = min_snr_weights(s, {0, 100, 999}, 5.0);
  double snr0 = 0.99915 / 0.00085;
  EXPECT_NEAR(w[0], 5.0 / snr0, 1e-12);
  double a100 = s.alphas_cumprod[100];
  EXPECT_NEAR(w[1], std::min(a100 / (1 - a100), 5.0) / (a100 / (1 - a100)), 1e-15);
  EXPECT_DOUBLE_EQ(w[2], 1.0);  // SNR_999 ≈ 0.0047 < γ
  EXPECT_THROW(min_snr_weights(s, {1000}, 5.0), WickError);
}

TEST(DiffusionDdpm, BatchFormulasTimestepsAndLoss) {
  DdpmSchedule s = DdpmSchedule::scaled_linear();
  Tensor x0 = test_input({3, 2, 2, 2}, 41);
  std::vector<uint64_t> ids{3, 30, 300};
  DdpmConfig cfg;
  cfg.min_snr_gamma = 5.0;
  DdpmBatch b = make_ddpm_batch(x0, ids, 1, 9, s, cfg);
  std::vector<double> xv = values(x0), xt = values(b.x_t), eps = values(b.target), tv = values(b.timesteps),
                      wv = values(b.weights);
  for (size_t i = 0; i < 3; ++i) {
    RngStream ts = derive_stream(9, ids[i], 1, RngPurpose::Timestep);
    int64_t t = static_cast<int64_t>(std::floor(static_cast<double>(stream_uniform(ts, 0)) * 1000.0));
    EXPECT_EQ(static_cast<int64_t>(tv[i]), t);
    double abar = s.alphas_cumprod[static_cast<size_t>(t)], snr = abar / (1 - abar);
    EXPECT_NEAR(wv[i], std::min(snr, 5.0) / snr, 1e-6);
    double a = static_cast<float>(std::sqrt(abar)), bb = static_cast<float>(std::sqrt(1 - abar));
    RngStream ns = derive_stream(9, ids[i], 1, RngPurpose::Noise);
    for (size_t j = 0; j < 8; ++j) {
      double e = static_cast<double>(stream_normal(ns, j));
      EXPECT_NEAR(eps[i * 8 + j], e, 1e-12);
      EXPECT_NEAR(xt[i * 8 + j], a * xv[i * 8 + j] + bb * e, 1e-12);
    }
  }
  // Timesteps cover 0..999 uniformly: mean ≈ 499.5.
  double sum = 0.0;
  for (uint64_t i = 0; i < 20000; ++i) sum += static_cast<double>(sample_timestep(1, i, 0, 1000));
  EXPECT_NEAR(sum / 20000.0, 499.5, 5.0 * 288.7 / std::sqrt(20000.0));
  // Loss = weighted MSE.
  Tensor pred = test_input({3, 2, 2, 2}, 42);
  autograd::set_requires_grad(pred, true);
  Tensor loss = ddpm_loss(pred, b);
  std::vector<double> p = values(pred);
  double expect = 0.0;
  for (size_t k = 0; k < 24; ++k) expect += wv[k / 8] * (p[k] - eps[k]) * (p[k] - eps[k]);
  EXPECT_NEAR(loss.item(), expect / 24.0, 1e-7);
  EXPECT_TRUE(autograd::backward(loss).get(pred).defined());
}

// v-prediction: the same x_t and noise, the target v = √ᾱ·ε − √(1 − ᾱ)·x0; min-SNR weights min(SNR, γ)/(SNR + 1).
TEST(DiffusionDdpm, VPredictionTargetAndWeights) {
  DdpmSchedule s = DdpmSchedule::scaled_linear();
  Tensor x0 = test_input({3, 2, 2, 2}, 41);
  std::vector<uint64_t> ids{3, 30, 300};
  DdpmConfig eps_config{.min_snr_gamma = 5.0}, v_config{.min_snr_gamma = 5.0, .v_prediction = true};
  DdpmBatch eps = make_ddpm_batch(x0, ids, 1, 9, s, eps_config), v = make_ddpm_batch(x0, ids, 1, 9, s, v_config);
  EXPECT_EQ(values(eps.x_t), values(v.x_t));
  std::vector<double> xv = values(x0), e = values(eps.target), vv = values(v.target), tv = values(v.timesteps),
                      wv = values(v.weights);
  for (size_t i = 0; i < 3; ++i) {
    const double abar = s.alphas_cumprod[static_cast<size_t>(tv[i])], snr = abar / (1 - abar);
    EXPECT_NEAR(wv[i], std::min(snr, 5.0) / (snr + 1), 1e-6);
    const double a = static_cast<float>(std::sqrt(abar)), b = static_cast<float>(std::sqrt(1 - abar));
    for (size_t j = 0; j < 8; ++j) EXPECT_NEAR(vv[i * 8 + j], a * e[i * 8 + j] - b * xv[i * 8 + j], 1e-12);
  }
  EXPECT_EQ(min_snr_weights(s, {999}, 5.0, true)[0], s.snr(999) / (s.snr(999) + 1));
}

// SDXL's micro-conditioning from a batch: (original h, w, crop top, left, 8·latent h, 8·latent w) per sample.
TEST(DiffusionObjective, SizeConditioningFromTheBatch) {
  Batch batch;
  batch.ids = {4, 9};
  batch.latents = zeros({2, 4, 16, 24}, DType::F32, Device::cpu());
  EXPECT_FALSE(size_conditioning(batch).defined()) << "a file without original_size: the model's default";
  batch.original_size = Tensor::from_vector<int64_t>({1024, 1536, 700, 900}, {2, 2});
  EXPECT_EQ(size_conditioning(batch).to_vector<float>(),
            (std::vector<float>{1024, 1536, 0, 0, 128, 192, 700, 900, 0, 0, 128, 192}));
  batch.crop = Tensor::from_vector<int64_t>({16, 0, 8, 24}, {2, 2});
  batch.text_embeds = zeros({2, 3, 8}, DType::F32, Device::cpu());
  batch.text_pooled = zeros({2, 8}, DType::F32, Device::cpu());
  batch.text_mask = zeros({2, 3}, DType::U8, Device::cpu());
  const Conditioning cond = drop_captions(batch, 0.0, 1, 0);
  EXPECT_EQ(cond.size_ids.to_vector<float>(),
            (std::vector<float>{1024, 1536, 16, 0, 128, 192, 700, 900, 8, 24, 128, 192}));
  batch.crop = Tensor::from_vector<int64_t>({16, 0, 8}, {3});
  EXPECT_THROW(size_conditioning(batch), WickError);
}

TEST(DiffusionObjective, ScaleLatentsAppliesThePerChannelNormalizationAfterTheScalar) {
  const Tensor z = test_input({2, 3, 2, 2}, 41, DType::F32);
  LatentDatasetAttributes data{
      .model_family = "x", .latent_channels = 3, .vae_scaling_factor = 0.5, .vae_shift_factor = 0.25};
  const std::vector<double> mean = {0.1, -0.7, 1.5}, stdev = {2.0, 0.25, 3.1};
  // Scalar only (a file without the per-channel attributes): as before.
  const std::vector<float> in = z.contiguous().to_vector<float>();
  const std::vector<float> scalar = Objective::scale_latents(z, data).to_vector<float>();
  ASSERT_EQ(scalar.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) EXPECT_FLOAT_EQ(scalar[i], (in[i] - 0.25f) * 0.5f) << i;
  // Then (x - mean_c) / std_c, c = (i / 4) % 3, in f32 with the values rounded to f32.
  data.vae_latents_mean = mean;
  data.vae_latents_std = stdev;
  const std::vector<float> got = Objective::scale_latents(z, data).to_vector<float>();
  ASSERT_EQ(got.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const size_t c = (i / 4) % 3;
    const float x = (in[i] - 0.25f) * 0.5f;
    EXPECT_FLOAT_EQ(got[i], (x - static_cast<float>(mean[c])) / static_cast<float>(stdev[c])) << i;
  }
  data.vae_latents_std = {2.0, 0.25};  // not one per channel
  try {
    Objective::scale_latents(z, data);
    ADD_FAILURE() << "a std of 2 values for 3 channels was accepted";
  } catch (const WickError& error) {
    EXPECT_EQ(error.kind(), ErrorKind::Data);
    EXPECT_THAT(error.what(), HasSubstr("'vae_latents_std' has 2 values, latent_channels is 3"));
  }
}

// ---- samplers ----

// A point mass at c: the exact flow velocity at (x, σ) is ε − c with ε = (x − (1 − σ)c)/σ, i.e. (x − c)/σ.
Denoiser exact_flow_model(const Tensor& c, int* calls) {
  return [c, calls](const Tensor& x, const Tensor& t, const Conditioning&) {
    EXPECT_FALSE(autograd::grad_enabled());
    if (calls) ++*calls;
    Shape s(static_cast<size_t>(x.dim()), 1);
    s[0] = x.shape()[0];
    Tensor sigma = t.reshape(s).to(x.dtype());
    return div(sub(x, c), sigma);
  };
}

TEST(DiffusionSamplers, EulerRecoversPointMassWithExactVelocity) {
  Tensor c = test_input({1, 4, 8, 8}, 51, DType::F32);
  for (SigmaShift shift : {SigmaShift::None, SigmaShift::Constant, SigmaShift::Resolution}) {
    for (uint64_t seed : {1u, 2u, 3u}) {
      int calls = 0;
      FlowSamplerConfig cfg;
      cfg.n_steps = 7;
      cfg.shift = shift;
      Tensor noise = mul(initial_noise({2, 4, 8, 8}, {seed, seed + 10}), 3.0);
      Tensor out = sample_flow_euler(exact_flow_model(c, &calls), noise, {}, cfg);
      EXPECT_EQ(calls, 7);
      std::vector<double> o = values(out), cv = values(c);
      for (size_t k = 0; k < o.size(); ++k) ASSERT_NEAR(o[k], cv[k % cv.size()], 1e-4) << k;
    }
  }
  FlowSamplerConfig cfg;
  cfg.n_steps = 4;
  cfg.shift = SigmaShift::Constant;
  std::vector<double> sg = flow_sigmas(cfg, {1, 4, 8, 8});
  ASSERT_EQ(sg.size(), 5u);
  EXPECT_DOUBLE_EQ(sg[0], 1.0);
  EXPECT_DOUBLE_EQ(sg[2], 0.75);
  EXPECT_DOUBLE_EQ(sg[4], 0.0);
}

TEST(DiffusionSamplers, DdimRecoversPointMassWithExactEpsilon) {
  DdpmSchedule sched = DdpmSchedule::scaled_linear();
  Tensor c = test_input({1, 3, 5, 5}, 61, DType::F32);
  Denoiser model = [&](const Tensor& x, const Tensor& t, const Conditioning&) {
    EXPECT_FALSE(autograd::grad_enabled());
    std::vector<float> tv = t.to_vector<float>();
    std::vector<float> a, b;
    for (float ti : tv) {
      double abar = sched.alphas_cumprod[static_cast<size_t>(ti)];
      a.push_back(static_cast<float>(std::sqrt(abar)));
      b.push_back(static_cast<float>(std::sqrt(1 - abar)));
    }
    int64_t n = x.shape()[0];
    Tensor av = Tensor::from_vector<float>(a, {n, 1, 1, 1}), bv = Tensor::from_vector<float>(b, {n, 1, 1, 1});
    return div(sub(x, mul(av, c)), bv);  // ε = (x − √ᾱ c)/√(1 − ᾱ)
  };
  for (int64_t steps : {1, 10, 50}) {
    DdimConfig cfg;
    cfg.n_steps = steps;
    Tensor out = sample_ddim(model, initial_noise({2, 3, 5, 5}, {7, 8}), {}, sched, cfg);
    std::vector<double> o = values(out), cv = values(c);
    for (size_t k = 0; k < o.size(); ++k) ASSERT_NEAR(o[k], cv[k % cv.size()], 1e-4) << steps << " " << k;
  }
  std::vector<int64_t> ts = ddim_timesteps(1000, 4);
  EXPECT_EQ(ts, (std::vector<int64_t>{999, 749, 499, 249}));
}

TEST(DiffusionSamplers, ClassifierFreeGuidance) {
  int calls = 0;
  std::vector<int64_t> batch_sizes;
  // v = x·pooled + t: pooled carries the condition.
  Denoiser model = [&](const Tensor& x, const Tensor& t, const Conditioning& c) {
    ++calls;
    batch_sizes.push_back(x.shape()[0]);
    return add(mul(x, c.pooled.reshape({x.shape()[0], 1})), t.reshape({x.shape()[0], 1}));
  };
  Tensor x = test_input({2, 3}, 71, DType::F32);
  Tensor t = Tensor::from_vector<float>({0.5f, 0.25f}, {2});
  Conditioning cond{Tensor(), Tensor(), Tensor::from_vector<float>({2.0f, -1.0f}, {2})};
  GuidanceConfig g;
  g.uncond.pooled = zeros({2}, DType::F32);
  Tensor v1 = guided_prediction(model, x, t, cond, g);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(values(v1), values(model(x, t, cond)));
  calls = 0;
  batch_sizes.clear();
  g.scale = 3.0;
  Tensor vb = guided_prediction(model, x, t, cond, g);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(batch_sizes, std::vector<int64_t>{4});
  std::vector<double> xv = values(x), vv = values(vb);
  const double pooled[2] = {2.0, -1.0}, tt[2] = {0.5, 0.25};
  for (size_t k = 0; k < 6; ++k) {
    double vc = xv[k] * pooled[k / 3] + tt[k / 3], vu = tt[k / 3];
    EXPECT_NEAR(vv[k], vu + 3.0 * (vc - vu), 1e-5);
  }
  // Unbatched (or unpairable conditionings) gives the same result in two forwards.
  calls = 0;
  g.batched = false;
  EXPECT_EQ(values(guided_prediction(model, x, t, cond, g)), vv);
  EXPECT_EQ(calls, 2);
}

TEST(DiffusionSamplers, InitialNoiseIsKeyedBySampleSeed) {
  Tensor a = initial_noise({2, 3, 4}, {10, 20});
  Tensor b = initial_noise({3, 3, 4}, {20, 30, 10});
  EXPECT_EQ(values(a.select(0, 0)), values(b.select(0, 2)));
  EXPECT_EQ(values(a.select(0, 1)), values(b.select(0, 0)));
  EXPECT_NE(values(a.select(0, 0)), values(a.select(0, 1)));
  EXPECT_EQ(initial_noise({1, 2}, {5}, DType::BF16).dtype(), DType::BF16);
}

}  // namespace
}  // namespace wick::diffusion
