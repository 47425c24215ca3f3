// model.quantize: float8 on the tiny SDXL UNet (tests/data/sdxl: 3 levels, 17 transformer blocks in 11 spatial
// transformers, 17 resnets): LoRA + LoCon training on a base whose block Linears (input_blocks, middle_block,
// output_blocks) are e4m3 codes with per-row f32 scales and whose convolutions stay f32, against PyTorch + PEFT on the
// same base dequantized the same way (tests/reference/make_sdxl_float8_fixtures.py: float8_lora_case and
// float8_dora_case, with lora_case's / dora_case's inputs, factors and magnitudes).
//
// Metric, per tensor: max_i |wick_i - ref_i| / max_i |ref_i|.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "engine/autograd/backward.h"
#include "engine/autograd/node.h"
#include "engine/autograd/ops_loss.h"
#include "engine/config/train_config.h"
#include "models/model_factory.h"
#include "models/nn/adapters.h"
#include "models/nn/conv.h"
#include "models/nn/linear.h"
#include "models/registry.h"
#include "models/sdxl/sdxl_unet.h"
#include "models/weights/float8_weights.h"
#include "runtime/error.h"
#include "runtime/safetensors.h"
#include "tests/test_data.h"

namespace wick::sdxl {
namespace {

using ::testing::HasSubstr;

std::string fixture_path(const std::string& name) { return wick::testing::test_data_dir() + "/sdxl/" + name; }

double relative_to_max(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.numel(), want.numel());
  std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  double worst = 0, scale = 0;
  for (size_t i = 0; i < w.size() && i < g.size(); ++i) {
    worst = std::max(worst, std::fabs(g[i] - w[i]));
    scale = std::max(scale, std::fabs(w[i]));
  }
  return scale > 0 ? worst / scale : worst;
}

void copy_into_slot(Tensor& slot, const Tensor& value) {
  autograd::detach(slot).copy_from(value.reshape(slot.shape()));
}

const DataGeometry kTinyGeometry{
    .latent_channels = 4, .latent_sizes = {{16, 16}}, .text_length = 7, .text_dim = 32, .pooled_dim = 16};

// The tiny UNet as `wick train` builds it: LoRA rank 4, alpha 8 on the preset all and kohya's LoCon set, the 3x3
// convolutions at rank 2, alpha 1 (network.conv), as lora_case; DoRA on the preset all with PEFT's output-axis
// magnitudes (save.format peft), as dora_case.
std::shared_ptr<DiffusionModel> build(const std::string& model_extra, const std::string& network = "lora") {
  const std::string yaml = "name: f8\ndevice: cpu\nmodel: {arch: sdxl, head_dim: 8, norm_groups: 4, "
                           "addition_time_embed_dim: 8, name_or_path: " +
                           fixture_path("tiny_ldm.safetensors") + model_extra + "}\nnetwork: {type: " + network +
                           ", linear: 4, linear_alpha: 8" + (network == "lora" ? ", conv: 2, conv_alpha: 1" : "") +
                           "}\n" + (network == "dora" ? "save: {format: peft}\n" : "") +
                           "dataset: {path: unused.h5}\n";
  TrainConfig config = parse_config_string(yaml, "<test>", config_schema());
  return build_model(config, kTinyGeometry, Device::cpu());
}

struct Step {
  Tensor output;
  double loss = 0;
  std::vector<std::pair<std::string, Tensor>> grads;  // lora_down / lora_up per module path
};

// <kind>_case's forward and backward with its factors (and DoRA magnitudes).
Step lora_step(DiffusionModel& model, const std::string& kind = "lora") {
  SafetensorsFile lora = SafetensorsFile::open(fixture_path(kind + "_case.safetensors"));
  auto adapters = nn::find_adapters(model);
  EXPECT_EQ(adapters.size(), kind == "lora" ? 257u : 192u);
  for (auto& [path, adapter] : adapters) {
    copy_into_slot(adapter->down_weight(), lora.get("ldm." + path + ".lora_down"));
    copy_into_slot(adapter->up_weight(), lora.get("ldm." + path + ".lora_up"));
    if (auto dora = std::dynamic_pointer_cast<nn::DoRALinear>(adapter))
      copy_into_slot(dora->magnitude(), lora.get("ldm." + path + ".magnitude"));
  }
  auto& unet = dynamic_cast<Unet&>(model);
  Step step;
  step.output = unet.forward(lora.get("latents_square"), lora.get("timesteps"), lora.get("context"),
                             lora.get("pooled"), lora.get("time_ids"));
  Tensor loss = autograd::mse_loss(step.output, lora.get("target"));
  step.loss = loss.item();
  autograd::GradientStore grads = autograd::backward(loss);
  for (auto& [path, adapter] : adapters) {
    step.grads.emplace_back(path + ".lora_down", grads.get(adapter->down_weight()));
    step.grads.emplace_back(path + ".lora_up", grads.get(adapter->up_weight()));
    if (auto dora = std::dynamic_pointer_cast<nn::DoRALinear>(adapter))
      step.grads.emplace_back(path + ".magnitude", grads.get(dora->magnitude()));
  }
  EXPECT_EQ(grads.size(), step.grads.size()) << "only the adapters get gradients";
  return step;
}

// The step against float8_<kind>_case; prints the errors.
void expect_matches_reference(const Step& step, const std::string& kind) {
  SafetensorsFile want = SafetensorsFile::open(fixture_path("float8_" + kind + "_case.safetensors"));
  const double out_error = relative_to_max(step.output, want.get("output"));
  const double loss_error = std::fabs(step.loss - want.get("loss").item()) / std::fabs(want.get("loss").item());
  double worst = 0;
  std::string worst_name;
  for (const auto& [name, grad] : step.grads) {
    ASSERT_TRUE(grad.defined()) << name;
    const double error = relative_to_max(grad, want.get("grad.ldm." + name));
    EXPECT_LE(error, 1e-4) << kind << ": " << name;
    if (error > worst) worst = error, worst_name = name;
  }
  SafetensorsFile unquantized = SafetensorsFile::open(fixture_path(kind + "_case.safetensors"));
  EXPECT_GT(std::fabs(step.loss - unquantized.get("loss").item()), 1e-5) << kind;
  std::printf("[SDXL float8 %s] output %.3g, loss %.9g vs %.9g (%.3g), worst of %zu adapter gradients %.3g (%s)\n",
              kind.c_str(), out_error, step.loss, want.get("loss").item(), loss_error, step.grads.size(), worst,
              worst_name.c_str());
  EXPECT_LE(out_error, 1e-5) << kind;
  EXPECT_LE(loss_error, 1e-5) << kind;
}

TEST(SdxlFloat8, QuantizedAtLoadLoraGradientsMatchDequantizingReference) {
  std::shared_ptr<DiffusionModel> model = build(", quantize: float8");
  // Every Linear of the blocks: 17 transformer blocks x 10, 11 transformers' proj_in and proj_out, 17 resnets'
  // emb_layers.1. time_embed and label_emb (not blocks) stay f32, and so does every convolution.
  EXPECT_EQ(count_float8_layers(*model), 17 * 10 + 11 * 2 + 17);
  int n_convs = 0;
  for (const auto& [path, module] : model->named_modules()) {
    if (const auto* conv = dynamic_cast<const nn::Conv2d*>(module.get())) {
      EXPECT_TRUE(is_floating(conv->weight_.dtype())) << path;
      ++n_convs;
    }
    const bool adapter_factor = path.find(".lora_") != std::string::npos;  // the adapters' own f32 Linears
    if (const auto* linear = dynamic_cast<const nn::Linear*>(module.get()); linear && !adapter_factor) {
      EXPECT_EQ(linear->is_float8(), path.rfind("time_embed", 0) != 0 && path.rfind("label_emb", 0) != 0) << path;
    }
  }
  EXPECT_GT(n_convs, 40);
  expect_matches_reference(lora_step(*model), "lora");
}

// DoRA on the transformers' Linears of the float8 base: the weight norm is the dequantized weight's plus the
// update's, as PEFT computes it on the dequantized base.
TEST(SdxlFloat8, DoraGradientsMatchDequantizingReference) {
  std::shared_ptr<DiffusionModel> model = build(", quantize: float8", "dora");
  EXPECT_EQ(count_float8_layers(*model), 17 * 10 + 11 * 2 + 17);
  expect_matches_reference(lora_step(*model, "dora"), "dora");
}

TEST(SdxlFloat8, FullFineTuningOfAFloat8BaseIsRefused) {
  try {
    build(", quantize: float8", "full");
    ADD_FAILURE() << "full fine-tuning of a float8 base was accepted";
  } catch (const WickError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Config);
    EXPECT_THAT(e.what(), HasSubstr("network.type full"));
  }
}

}  // namespace
}  // namespace wick::sdxl
