// Qwen-Image's denoising loop (models/qwenimage/qwenimage_sampler.h) against diffusers' QwenImagePipeline
// (tests/data/qwenimage_sample, tests/reference/make_qwenimage_sample_fixtures.py): the scheduler's sigmas at the tiny
// size and at the real ones, the final latents and the decoded images without CFG and with true CFG (a negative prompt
// of another length), from the committed tiny transformer (tests/data/qwenimage) and tiny VAE (tests/data/
// qwenimage_vae) in float32; the Philox noise and the errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/qwenimage/qwenimage_sampler.h"
#include "models/qwenimage/qwenimage_weights.h"
#include "models/vae/wan_vae_weights.h"
#include "runtime/ops/creation.h"
#include "runtime/safetensors.h"
#include "tests/error_of.h"
#include "tests/models/arch_test_util.h"

namespace wick::qwenimage {
namespace {

using ::testing::HasSubstr;
using wick::testing::data_path;
using wick::testing::error_of;
using wick::testing::max_abs_difference;
using wick::testing::relative_to_max;

const SafetensorsFile& sample_case() {
  static const SafetensorsFile file = SafetensorsFile::open(data_path("qwenimage_sample/case.safetensors"));
  return file;
}

std::shared_ptr<QwenImageTransformer> tiny_transformer() {
  static const std::shared_ptr<QwenImageTransformer> model =
      load_transformer(WeightSource::open(data_path("qwenimage/transformer"), "transformer"), {.dtype = DType::F32})
          .model;
  return model;
}

std::shared_ptr<vae::WanVae> tiny_vae() {
  static const std::shared_ptr<vae::WanVae> model = vae::load_wan_vae(data_path("qwenimage_vae/vae")).model;
  return model;
}

QwenImageText fixture_text(bool negative) {
  QwenImageText text{
      .prompts = {.context = sample_case().get("prompt_embeds"), .context_mask = sample_case().get("prompt_mask")}};
  if (negative) text.negative = {.context = sample_case().get("negative_embeds")};
  return text;
}

// Prints and returns max |got − want| / max |want| (with the absolute error and the largest value).
double compare(const char* what, const Tensor& got, const Tensor& want) {
  const double absolute = max_abs_difference(got, want), relative = relative_to_max(got, want);
  std::printf("qwenimage sample %-14s vs QwenImagePipeline: max abs err %.2e, max |want| %.3g, relative %.2e\n", what,
              absolute, absolute / relative, relative);
  return relative;
}

// The decoded images of `latents` against the pipeline's `name`.images, with the two parts of the error printed: the
// decoder alone (the pipeline's own final latents through wick's VAE) and the latents' f32 differences carried through
// the decoder (wick's decoder on wick's latents vs on the pipeline's). The tiny random VAE amplifies latent
// differences several times (its f32 decode differs from diffusers' f64 one by 3.1e-5, qwenimage_vae_test.cpp), so
// images are bounded by 1e-4 as that test's f32 decode is, the latents by 1e-5.
void expect_images(const std::string& name, const Tensor& latents) {
  const Tensor want = sample_case().get(name + ".images");
  const Tensor images = qwenimage_decode(*tiny_vae(), latents);
  const Tensor from_pipeline_latents = qwenimage_decode(*tiny_vae(), sample_case().get(name + ".latents"));
  EXPECT_LE(compare((name + " images").c_str(), images, want), 1e-4);
  EXPECT_LE(compare("  decoder alone", from_pipeline_latents, want), 1e-4);
  const double carried = max_abs_difference(images, from_pipeline_latents);
  std::printf("qwenimage sample   latents' share (wick's decoder, wick's vs the pipeline's latents): %.2e\n", carried);
}

// The pipeline's sigmas (FlowMatchEulerDiscreteScheduler.set_timesteps with the pipeline's linspace and mu, the real
// scheduler config), float32 for float32: the fixture's calls (15 tokens) and 1024², 1328², 512² and 2 steps.
TEST(QwenImageSampler, SigmasAreThePipelines) {
  std::vector<std::tuple<std::string, int64_t, int64_t>> schedules = {{"plain.sigmas", 4, 15}, {"cfg.sigmas", 5, 15}};
  for (const auto& pair : nlohmann::json::parse(sample_case().metadata().at("schedules")))
    schedules.emplace_back("schedule." + pair[0].dump() + "." + pair[1].dump(), pair[0].get<int64_t>(),
                           pair[1].get<int64_t>());
  EXPECT_EQ(schedules.size(), 7u);
  for (const auto& [name, steps, tokens] : schedules) {
    SCOPED_TRACE(name);
    const std::vector<float> want = sample_case().get(name).to_vector<float>();
    const std::vector<double> got = qwenimage_sigmas(steps, tokens);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(static_cast<float>(got[i]), want[i]) << i;
    EXPECT_NEAR(got[got.size() - 2], 0.02, 1e-7);
  }
  // The model's timestep is (1000 σ) / 1000 (QwenImageTransformer::predict); the scheduler's timesteps are 1000 σ.
  const std::vector<float> timesteps = sample_case().get("cfg.timesteps").to_vector<float>();
  const std::vector<double> sigmas = qwenimage_sigmas(5, 15);
  for (size_t i = 0; i < timesteps.size(); ++i) EXPECT_EQ(static_cast<float>(sigmas[i]) * 1000.0f, timesteps[i]) << i;
  EXPECT_NEAR(qwenimage_mu(4096), 0.6935483870967742, 1e-15);  // 1024 x 1024 (MODELS2: shift e^mu = 2.00)
  EXPECT_NEAR(qwenimage_mu(6889), 0.8343245967741936, 1e-15);  // 1328 x 1328 (2.30)
  EXPECT_EQ(qwenimage_sigmas(1, 4096), (std::vector<double>{1.0, 0.0}));
  EXPECT_THAT(error_of([] { qwenimage_sigmas(0, 15); }), HasSubstr("steps must be >= 1"));
}

// Without CFG (true_cfg_scale 1, no negative rows; prompt 0 padded and masked): the final latents and the images.
TEST(QwenImageSampler, LatentsAndImagesAreThePipelines) {
  const Tensor latents = qwenimage_denoise(*tiny_transformer(), fixture_text(false), sample_case().get("noise"),
                                           {.steps = 4, .true_cfg_scale = 1.0});
  EXPECT_LE(compare("plain latents", latents, sample_case().get("plain.latents")), 1e-5);
  expect_images("plain", latents);
  // A negative prompt with true_cfg_scale <= 1 is not used (the pipeline warns and runs one forward per step).
  const Tensor unguided = qwenimage_denoise(*tiny_transformer(), fixture_text(true), sample_case().get("noise"),
                                            {.steps = 4, .true_cfg_scale = 1.0});
  EXPECT_EQ(unguided.to_vector<float>(), latents.to_vector<float>());
}

// True CFG at 4 with a 4-token negative prompt (one row for both samples): neg + 4 (pos − neg), rescaled per token.
TEST(QwenImageSampler, TrueCfgIsThePipelines) {
  const Tensor latents = qwenimage_denoise(*tiny_transformer(), fixture_text(true), sample_case().get("noise"),
                                           {.steps = 5, .true_cfg_scale = 4.0});
  EXPECT_LE(compare("cfg latents", latents, sample_case().get("cfg.latents")), 1e-5);
  expect_images("cfg", latents);
  // Without the negative rows the scale does nothing: the 5-step result differs.
  const Tensor plain = qwenimage_denoise(*tiny_transformer(), fixture_text(false), sample_case().get("noise"),
                                         {.steps = 5, .true_cfg_scale = 4.0});
  EXPECT_GT(max_abs_difference(plain, latents), 0.1);
}

// Image i's noise is derive_stream(seed, i, 0, Noise)'s whatever the batch; sizes must be multiples of 16 pixels.
TEST(QwenImageSampler, NoiseIsPerImage) {
  const Tensor two = qwenimage_noise(0, 2, 48, 80, 7, Device::cpu());
  EXPECT_EQ(two.shape(), (Shape{2, 16, 6, 10}));
  EXPECT_EQ(two.dtype(), DType::F32);
  EXPECT_EQ(qwenimage_noise(1, 1, 48, 80, 7, Device::cpu()).to_vector<float>(),
            two.narrow(0, 1, 1).contiguous().to_vector<float>());
  EXPECT_NE(qwenimage_noise(0, 1, 48, 80, 8, Device::cpu()).to_vector<float>(),
            two.narrow(0, 0, 1).contiguous().to_vector<float>());
  EXPECT_THAT(error_of([] { qwenimage_noise(0, 1, 40, 80, 7, Device::cpu()); }), HasSubstr("multiples of 16 pixels"));
}

TEST(QwenImageSampler, RefusesWhatDoesNotFit) {
  QwenImageTransformer& model = *tiny_transformer();
  const Tensor noise = sample_case().get("noise");
  EXPECT_THAT(error_of([&] {
                qwenimage_denoise(model, fixture_text(false), zeros({2, 8, 6, 10}), {.steps = 2});
              }),
              HasSubstr("noise must be a floating [B, 16, h, w]"));
  EXPECT_THAT(error_of([&] { qwenimage_denoise(model, fixture_text(false), noise, {.steps = 0}); }),
              HasSubstr("steps must be >= 1"));
  QwenImageText three = fixture_text(true);
  three.negative.context = zeros({3, 4, 32});
  EXPECT_THAT(error_of([&] { qwenimage_denoise(model, three, noise, {.steps = 2}); }),
              HasSubstr("negative prompt rows must be a floating [2 or 1, L, text_dim]"));
  QwenImageText bad_mask = fixture_text(false);
  bad_mask.prompts.context_mask = zeros({2, 5});
  EXPECT_THAT(error_of([&] { qwenimage_denoise(model, bad_mask, noise, {.steps = 2}); }),
              HasSubstr("the prompt mask must be [2, 11]"));
  EXPECT_THAT(error_of([] {
                qwenimage_decode(*tiny_vae(), zeros({1, 4, 6, 10}));
              }),
              HasSubstr("latents must be a floating [B, 16, h, w]"));
}

}  // namespace
}  // namespace wick::qwenimage
