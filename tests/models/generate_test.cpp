// Sampling from a DiT (models/diffusion/generate.h): shapes, finiteness, determinism per seed, image i
// independent of the number of captions (across the batch boundary), the flow and DDIM paths,
// guidance and the caption taking effect, the training flag restored, and latents -> pixels.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "engine/data/fashion_pack.h"
#include "engine/init.h"
#include "models/diffusion/generate.h"
#include "models/dit/dit.h"
#include "runtime/ops/copy.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/random.h"
#include "tests/error_of.h"

namespace wick {
namespace {

using ::testing::HasSubstr;
using wick::testing::error_of;

double max_abs_diff(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  EXPECT_EQ(x.size(), y.size());
  double worst = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) worst = std::max(worst, std::fabs(x[i] - y[i]));
  return worst;
}

bool all_finite(const Tensor& a) {
  for (double v : a.to_vector<double>())
    if (!std::isfinite(v)) return false;
  return true;
}

// A tiny DiT whose zero-initialized layers (adaLN-Zero, final layer) get random values, so that it
// predicts something that depends on x, t and the text.
std::shared_ptr<DiT> tiny_dit(uint64_t seed) {
  set_init_seed(seed);
  auto dit = std::make_shared<DiT>(DiTConfig{.in_channels = 4, .input_size = 4, .patch_size = 2, .hidden_size = 32,
                                             .depth = 1, .num_heads = 2, .mlp_ratio = 2.0, .text_dim = 16,
                                             .pooled_dim = 16});
  uint64_t k = 0;
  for (auto& [name, p] : dit->named_parameters()) {
    bool zero = true;
    for (double v : p.to_vector<double>()) zero = zero && v == 0.0;
    if (zero) copy_into(p, mul(randn(p.shape(), derive_stream(seed, k++, 0, RngPurpose::Test)), 0.2));
  }
  return dit;
}

TrainConfig flow_config() {
  TrainConfig config;
  config.name = "generate-test";
  config.model.arch = "dit";
  return config;
}

std::vector<std::string> captions_of(int64_t n) {
  const std::vector<std::string> names = {"Bag", "Ankle boot", "", "T-shirt/top", "Sneaker"};
  std::vector<std::string> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(names[static_cast<size_t>(i) % names.size()]);
  return out;
}

TEST(Generate, FiniteLatentsOfTheModelShapeDeterministicPerSeed) {
  auto dit = tiny_dit(1);
  HashedTextEncoder encoder(8, 16);
  TrainConfig config = flow_config();
  Tensor a = generate_latents(*dit, config, encoder, captions_of(5), {4, 4, 4}, 4, 3.0, 11);
  EXPECT_EQ(a.shape(), (Shape{5, 4, 4, 4}));
  EXPECT_EQ(a.dtype(), DType::F32);
  EXPECT_TRUE(a.device().is_cpu());
  EXPECT_TRUE(all_finite(a));
  Tensor again = generate_latents(*dit, config, encoder, captions_of(5), {4, 4, 4}, 4, 3.0, 11);
  EXPECT_EQ(max_abs_diff(a, again), 0.0);
  Tensor other_seed = generate_latents(*dit, config, encoder, captions_of(5), {4, 4, 4}, 4, 3.0, 12);
  EXPECT_GT(max_abs_diff(a, other_seed), 0.1);
}

TEST(Generate, ImageIDoesNotDependOnTheNumberOfImages) {
  auto dit = tiny_dit(2);
  HashedTextEncoder encoder(8, 16);
  TrainConfig config = flow_config();
  // 70 images: two batches (64 + 6); the first 3 and image 66 must match shorter calls.
  Tensor many = generate_latents(*dit, config, encoder, captions_of(70), {4, 4, 4}, 3, 2.0, 5);
  Tensor few = generate_latents(*dit, config, encoder, captions_of(3), {4, 4, 4}, 3, 2.0, 5);
  EXPECT_LT(max_abs_diff(many.narrow(0, 0, 3), few), 1e-5);
  Tensor upto_66 = generate_latents(*dit, config, encoder, captions_of(67), {4, 4, 4}, 3, 2.0, 5);
  EXPECT_LT(max_abs_diff(many.narrow(0, 66, 1), upto_66.narrow(0, 66, 1)), 1e-5);
}

TEST(Generate, CaptionAndGuidanceChangeTheResultAndTheModeIsRestored) {
  auto dit = tiny_dit(3);
  HashedTextEncoder encoder(8, 16);
  TrainConfig config = flow_config();
  dit->train(true);
  Tensor bag = generate_latents(*dit, config, encoder, {"Bag"}, {4, 4, 4}, 4, 1.0, 9);
  EXPECT_TRUE(dit->is_training());
  Tensor boot = generate_latents(*dit, config, encoder, {"Ankle boot"}, {4, 4, 4}, 4, 1.0, 9);
  EXPECT_GT(max_abs_diff(bag, boot), 1e-3);
  Tensor guided = generate_latents(*dit, config, encoder, {"Bag"}, {4, 4, 4}, 4, 4.0, 9);
  EXPECT_GT(max_abs_diff(bag, guided), 1e-3);
  // Guidance changes nothing for the unconditional caption (conditional = unconditional input).
  Tensor empty_1 = generate_latents(*dit, config, encoder, {""}, {4, 4, 4}, 4, 1.0, 9);
  Tensor empty_4 = generate_latents(*dit, config, encoder, {""}, {4, 4, 4}, 4, 4.0, 9);
  EXPECT_LT(max_abs_diff(empty_1, empty_4), 1e-5);
  dit->eval();
  generate_latents(*dit, config, encoder, {"Bag"}, {4, 4, 4}, 2, 1.0, 9);
  EXPECT_FALSE(dit->is_training());
}

TEST(Generate, DdpmUsesDdimAndTheShiftChangesTheFlowPath) {
  auto dit = tiny_dit(4);
  HashedTextEncoder encoder(8, 16);
  TrainConfig flow = flow_config();
  TrainConfig ddpm = flow_config();
  ddpm.train.noise_scheduler = NoiseScheduler::Ddpm;
  Tensor f = generate_latents(*dit, flow, encoder, captions_of(2), {4, 4, 4}, 5, 2.0, 3);
  Tensor d = generate_latents(*dit, ddpm, encoder, captions_of(2), {4, 4, 4}, 5, 2.0, 3);
  EXPECT_TRUE(all_finite(d));
  EXPECT_GT(max_abs_diff(f, d), 1e-3);
  TrainConfig shifted = flow_config();
  shifted.train.timestep_shift = 3.0;
  EXPECT_GT(max_abs_diff(f, generate_latents(*dit, shifted, encoder, captions_of(2), {4, 4, 4}, 5, 2.0, 3)), 1e-4);
  // A sampler that does not fit the objective is a config error.
  ddpm.sample.sampler = SamplerKind::Euler;
  EXPECT_THAT(error_of([&] { generate_latents(*dit, ddpm, encoder, {"Bag"}, {4, 4, 4}, 2, 1.0, 3); }),
              HasSubstr("does not fit train.noise_scheduler ddpm"));
  // DDIM takes the output as ε: a v-prediction model is refused, naming the architecture (SDXL's sampler reads v).
  ddpm.sample.sampler = SamplerKind::Auto;
  ddpm.train.prediction_type = PredictionType::V;
  EXPECT_THAT(error_of([&] { generate_latents(*dit, ddpm, encoder, {"Bag"}, {4, 4, 4}, 2, 1.0, 3); }),
              HasSubstr("DDIM sample images of model.arch dit take the model's output as ε"));
}

TEST(Generate, BadArgumentsNameTheProblem) {
  auto dit = tiny_dit(5);
  TrainConfig config = flow_config();
  EXPECT_THAT(error_of([&] { generate_latents(*dit, config, HashedTextEncoder(8, 16), {"Bag"}, {4, 4, 4}, 0, 1.0, 1); }),
              HasSubstr("steps must be >= 1"));
  EXPECT_THAT(error_of([&] { generate_latents(*dit, config, HashedTextEncoder(8, 16), {"Bag"}, {4, 4, 4}, 2, -1.0, 1); }),
              HasSubstr("guidance must be >= 0"));
  EXPECT_THAT(error_of([&] { generate_latents(*dit, config, HashedTextEncoder(8, 32), {"Bag"}, {4, 4, 4}, 2, 1.0, 1); }),
              HasSubstr("L, 16]"));
  EXPECT_EQ(generate_latents(*dit, config, HashedTextEncoder(8, 16), {}, {4, 4, 4}, 2, 1.0, 1).shape(), (Shape{0, 4, 4, 4}));
}

TEST(Generate, LatentsToImagesInvertsThePacking) {
  std::vector<float> pixels(2 * 784);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<float>((i * 37) % 256) / 255.0f;
  Tensor images = Tensor::from_vector(pixels, {2, 784});
  LatentDatasetAttributes data{.model_family = "fashion-dit", .latent_channels = 4};
  Tensor back = latents_to_images(pack_images_2x2(images), data);
  EXPECT_EQ(back.shape(), (Shape{2, 1, 28, 28}));
  EXPECT_LT(max_abs_diff(back.reshape({2, 784}), images), 1e-6);
  // unpack_latents_2x2 is the layout inverse: latent channel dy*2 + dx holds pixel (2i + dy, 2j + dx).
  Tensor latents = pack_images_2x2(images);
  Tensor unpacked = unpack_latents_2x2(latents);
  EXPECT_FLOAT_EQ(unpacked.to_vector<float>()[1 * 28 + 3], latents.to_vector<float>()[(3 * 14 + 0) * 14 + 1]);
  // Values outside [-1, 1] clamp to [0, 1]; scaling and shift are undone first.
  Tensor big = mul(pack_images_2x2(images), 3.0);
  Tensor clamped = latents_to_images(big, data);
  for (double v : clamped.to_vector<double>()) EXPECT_TRUE(v >= 0.0 && v <= 1.0);
  LatentDatasetAttributes scaled{.model_family = "fashion-dit", .latent_channels = 4, .vae_scaling_factor = 2.0,
                                 .vae_shift_factor = 0.25};
  Tensor model_side = mul(add(pack_images_2x2(images), -0.25), 2.0);  // (latent − shift)·scaling
  EXPECT_LT(max_abs_diff(latents_to_images(model_side, scaled).reshape({2, 784}), images), 1e-6);
  EXPECT_THAT(error_of([&] { latents_to_images(latents, {.model_family = "flux", .latent_channels = 4}); }),
              HasSubstr("VAE decoder"));
}

}  // namespace
}  // namespace wick
