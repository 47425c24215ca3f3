// Z-Image as wick trains it (models/zimage): predict() as the flow-matching denoiser the training step and the
// samplers drive (t = 1 - sigma in, -output out, masked captions), block swapping bitwise equal to none, and LoRA
// files in kohya (musubi-tuner) and PEFT (diffusers) naming written and loaded back. On the tiny fixture model of
// tests/data/zimage (make_zimage_fixtures.py). The memory profile is checked in memory_estimate_test.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/autograd/backward.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/autograd/ops_loss.h"
#include "engine/block_swap.h"
#include "models/diffusion/flow_matching.h"
#include "models/lora_files.h"
#include "models/model_factory.h"
#include "models/nn/adapters.h"
#include "models/weights/lora_format.h"
#include "models/zimage/zimage.h"
#include "models/zimage/zimage_lora.h"
#include "models/zimage/zimage_weights.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/random.h"
#include "runtime/safetensors.h"
#include "tests/models/arch_test_util.h"

namespace wick::zimage {
namespace {

using wick::testing::copy_into_slot;
using wick::testing::data_path;
using wick::testing::relative_to_max;

std::shared_ptr<ZImageTransformer> load_tiny() {
  return load_transformer(WeightSource::open(data_path("zimage/diffusers"), "transformer"), {.dtype = DType::F32})
      .model;
}

Tensor random_tensor(const Shape& shape, uint64_t key) { return randn(shape, RngStream{key, 7}); }

// Two samples of 6 x 10 latents; captions of 7 and 40 tokens padded to 40 (context_mask 1 on the caption tokens).
struct Batch {
  Tensor x, sigma, target;
  diffusion::Conditioning cond;
};

Batch tiny_batch() {
  Batch b;
  b.x = random_tensor({2, 16, 6, 10}, 1);
  b.sigma = Tensor::from_vector<float>({0.3f, 0.85f}, {2});
  b.target = random_tensor({2, 16, 6, 10}, 3);
  std::vector<float> mask(80, 0.0f);
  for (int i = 0; i < 7; ++i) mask[static_cast<size_t>(i)] = 1.0f;
  for (int i = 40; i < 80; ++i) mask[static_cast<size_t>(i)] = 1.0f;
  b.cond.context = random_tensor({2, 40, 32}, 2);
  b.cond.context_mask = Tensor::from_vector<float>(mask, {2, 40});
  return b;
}

// Random LoRA factors (lora_up is zero at initialization, which would hide the adapters' effect).
void randomize_adapters(Module& model, uint64_t key) {
  for (auto& [path, adapter] : nn::find_adapters(model)) {
    copy_into_slot(adapter->down_weight(), random_tensor(adapter->down_weight().shape(), key++));
    copy_into_slot(adapter->up_weight(), mul(random_tensor(adapter->up_weight().shape(), key++), 0.1));
  }
}

TEST(ZImageDiffusion, PredictIsTheNegatedOutputAtOneMinusSigma) {
  auto model = load_tiny();
  const Batch b = tiny_batch();
  autograd::NoGradGuard no_grad;
  const Tensor v = model->predict(b.x, b.sigma, b.cond);
  ASSERT_EQ(v.shape(), b.x.shape());
  const std::vector<float> sigma = b.sigma.to_vector<float>();
  // t = (1000 - 1000 sigma) / 1000 in f32, as the pipelines compute it from the scheduler's timesteps.
  auto model_time = [](float s) {
    const auto timestep = static_cast<float>(s * 1000.0f);
    return static_cast<float>((1000.0f - timestep) / 1000.0f);
  };
  const Tensor t = Tensor::from_vector<float>({model_time(sigma[0]), model_time(sigma[1])}, {2});
  // The padded caption rows do not reach the model: sample 0 sees its 7 caption tokens only.
  const std::vector<Tensor> out =
      model->forward({b.x.select(0, 0), b.x.select(0, 1)}, t,
                     {b.cond.context.select(0, 0).narrow(0, 0, 7), b.cond.context.select(0, 1)});
  const std::vector<float> got = v.to_vector<float>();
  std::vector<float> want;
  for (const Tensor& o : out)
    for (float value : o.to_vector<float>()) want.push_back(-value);
  EXPECT_EQ(got, want);
  EXPECT_EQ(model->arch_name(), "zimage");
  EXPECT_EQ(model->block_paths(),
            (std::vector<std::string>{"noise_refiner.0", "context_refiner.0", "layers.0", "layers.1"}));
}

// diffusers' training step (train_dreambooth_lora_z_image.py, make_zimage_fixtures.py flow_matching_case): the same
// noisy latents through predict() and wick's flow-matching loss against eps - x0 give diffusers' prediction and loss.
TEST(ZImageDiffusion, FlowMatchingLossMatchesDiffusersTrainingStep) {
  SafetensorsFile file = SafetensorsFile::open(data_path("zimage/flow_matching_case.safetensors"));
  const Tensor x0 = file.get("x0"), noise = file.get("noise"), sigma = file.get("sigma");
  const std::vector<float> x0_values = x0.to_vector<float>(), noise_values = noise.to_vector<float>(),
                           sigmas = sigma.to_vector<float>();
  std::vector<float> noisy(x0_values.size()), target(x0_values.size());
  const size_t per_sample = x0_values.size() / sigmas.size();
  for (size_t i = 0; i < noisy.size(); ++i) {
    const float s = sigmas[i / per_sample];
    noisy[i] = (1.0f - s) * x0_values[i] + s * noise_values[i];
    target[i] = noise_values[i] - x0_values[i];
  }
  auto model = load_tiny();
  const diffusion::Conditioning cond{.context = file.get("context"), .context_mask = file.get("context_mask")};
  const Tensor pred = model->predict(Tensor::from_vector<float>(noisy, x0.shape()), sigma, cond);
  const Tensor loss = diffusion::flow_matching_loss(pred, Tensor::from_vector<float>(target, x0.shape()));
  const double pred_error = relative_to_max(pred, file.get("prediction"));
  const double loss_error = std::fabs(loss.item() - file.get("loss").item()) / file.get("loss").item();
  std::printf("Z-Image flow-matching step vs diffusers: prediction %.3g, loss %.3g (loss %.6f)\n", pred_error,
              loss_error, loss.item());
  EXPECT_LE(pred_error, 2e-5);  // the t_embedder's sinusoid, as the forward's 8.4e-6 (tests/data/zimage/README.md)
  EXPECT_LE(loss_error, 1e-5);
}

struct Trace {
  std::vector<std::vector<float>> outputs, grads;
  std::vector<double> losses;
  BlockSwapper::Stats stats{};
};

// Two training steps (LoRA on the main layers, gradient checkpointing), then a forward without gradients.
Trace two_steps_and_inference(ZImageTransformer& model) {
  const Batch b = tiny_batch();
  auto adapters = nn::find_adapters(model);
  Trace trace;
  for (int i = 0; i < 2; ++i) {
    Tensor v = model.predict(b.x, b.sigma, b.cond);
    Tensor loss = autograd::mse_loss(v, b.target);
    autograd::GradientStore grads = autograd::backward(loss);
    trace.outputs.push_back(v.to_vector<float>());
    trace.losses.push_back(loss.item());
    for (auto& [path, adapter] : adapters) {
      trace.grads.push_back(grads.get(adapter->down_weight()).to_vector<float>());
      trace.grads.push_back(grads.get(adapter->up_weight()).to_vector<float>());
    }
  }
  if (const BlockSwapper* swapper = model.block_swapper()) trace.stats = swapper->stats();
  autograd::NoGradGuard no_grad;
  trace.outputs.push_back(model.predict(b.x, b.sigma, b.cond).to_vector<float>());
  return trace;
}

std::shared_ptr<ZImageTransformer> tiny_with_lora() {
  auto model = load_tiny();
  nn::apply_adapters(*model, {.patterns = lora_target_presets().at(kDefaultLoraPreset),
                              .options = {.rank = 4, .alpha = 8}});
  randomize_adapters(*model, 100);
  model->set_gradient_checkpointing(true);
  return model;
}

TEST(ZImageBlockSwap, BitwiseEqualToNoSwappingWithinTwoBlocksResident) {
  auto plain = tiny_with_lora();
  const Trace want = two_steps_and_inference(*plain);
  for (int n : {2, 4}) {  // the main layers; every block (the frozen refiners too)
    auto model = tiny_with_lora();
    std::shared_ptr<BlockSwapper> swapper = attach_block_swapper(*model, n, Device::cpu());
    ASSERT_EQ(swapper->n_blocks(), n);
    EXPECT_EQ(swapper->block_name(0), n == 2 ? "layers.0" : "noise_refiner.0");
    const Trace got = two_steps_and_inference(*model);
    EXPECT_EQ(got.losses, want.losses) << n;
    EXPECT_EQ(got.outputs, want.outputs) << n;
    EXPECT_EQ(got.grads, want.grads) << n;
    int64_t largest = 0;
    for (int k = 0; k < n; ++k) largest = std::max(largest, swapper->block_bytes(k));
    EXPECT_GT(got.stats.n_block_copies, 0) << n;
    EXPECT_LE(got.stats.peak_resident_bytes, 2 * largest) << n << ": at most two blocks resident";
  }
}

TEST(ZImageLoraFiles, PresetsMatchTheLinearsOfTheirBlocks) {
  const auto presets = lora_target_presets();
  auto count = [&](const std::string& preset) {
    auto model = load_tiny();
    nn::apply_adapters(*model, {.patterns = presets.at(preset), .options = {.rank = 4}});
    return nn::find_adapters(*model).size();
  };
  EXPECT_EQ(count("all"), 2u * 8u);  // to_q, to_k, to_v, to_out.0, w1, w2, w3, adaLN_modulation.0 per layer
  EXPECT_EQ(count("attention"), 2u * 4u);
  EXPECT_EQ(count("attention_mlp"), 2u * 7u);
  EXPECT_EQ(count("attention_refiners"), 4u * 4u);
  EXPECT_EQ(count("all_refiners"), 2u * 8u + 8u + 7u);  // the context refiner has no adaLN
}

// Writes the tiny model's LoRA in `format`, returns the file's tensor names and loads it into a fresh model.
std::vector<std::string> save_and_reload(LoraFormat format, const std::string& path) {
  auto model = tiny_with_lora();
  TrainConfig config;
  config.name = "zimage_tiny";
  config.save.format = format;
  config.save.dtype = DType::F32;
  save_lora(*model, lora_naming(), config, path, 10, "");
  SafetensorsFile file = SafetensorsFile::open(path);
  std::vector<std::string> names = file.names();

  auto other = load_tiny();
  nn::apply_adapters(*other, {.patterns = lora_target_presets().at(kDefaultLoraPreset),
                              .options = {.rank = 4, .alpha = 8}});
  load_lora(*other, lora_naming(), path);
  auto want = nn::find_adapters(*model), got = nn::find_adapters(*other);
  EXPECT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    EXPECT_EQ(got[i].first, want[i].first);
    EXPECT_EQ(got[i].second->down_weight().to_vector<float>(), want[i].second->down_weight().to_vector<float>());
    // alpha / r = 2: baking the scale into PEFT's lora_B and dividing it out again is exact.
    EXPECT_EQ(got[i].second->up_weight().to_vector<float>(), want[i].second->up_weight().to_vector<float>());
  }
  return names;
}

TEST(ZImageLoraFiles, KohyaAsMusubiWritesItLoadsBack) {
  const std::string path = ::testing::TempDir() + "zimage_kohya.safetensors";
  const std::vector<std::string> names = save_and_reload(LoraFormat::Kohya, path);
  EXPECT_EQ(names.size(), 16u * 3u);
  for (const char* key : {"lora_unet_layers_0_attention_to_q.lora_down.weight",
                          "lora_unet_layers_1_attention_to_out_0.lora_up.weight",
                          "lora_unet_layers_0_feed_forward_w2.alpha",
                          "lora_unet_layers_1_adaLN_modulation_0.lora_down.weight"})
    EXPECT_NE(std::find(names.begin(), names.end(), key), names.end()) << key;
  SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_EQ(file.metadata().at("ss_base_model_version"), "zimage");
  std::filesystem::remove(path);
}

TEST(ZImageLoraFiles, PeftAsDiffusersLoadsItLoadsBack) {
  const std::string path = ::testing::TempDir() + "zimage_peft.safetensors";
  const std::vector<std::string> names = save_and_reload(LoraFormat::Peft, path);
  EXPECT_EQ(names.size(), 16u * 2u);
  for (const char* key : {"transformer.layers.0.attention.to_q.lora_A.weight",
                          "transformer.layers.1.attention.to_out.0.lora_B.weight",
                          "transformer.layers.0.feed_forward.w3.lora_A.weight"})
    EXPECT_NE(std::find(names.begin(), names.end(), key), names.end()) << key;
  for (const std::string& name : names) EXPECT_EQ(name.rfind("transformer.layers.", 0), 0u) << name;
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace wick::zimage
