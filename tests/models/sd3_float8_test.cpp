// model.quantize: float8 on the tiny SD3.5-Medium-like MMDiT (tests/data/sd3: 3 joint blocks, attn2 in 0 and 1, QK
// norm): LoRA training on a base whose joint-block Linears are e4m3 codes with per-row f32 scales, against PyTorch +
// PEFT on the same base dequantized the same way (tests/reference/make_sd3_float8_fixtures.py:
// medium_float8_lora_case and medium_float8_dora_case, with medium_lora_case's / medium_dora_case's inputs, factors and
// magnitudes).
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
#include "models/registry.h"
#include "models/sd3/sd3.h"
#include "models/weights/float8_weights.h"
#include "runtime/error.h"
#include "runtime/safetensors.h"
#include "tests/test_data.h"

namespace wick::sd3 {
namespace {

using ::testing::HasSubstr;

std::string fixture_path(const std::string& name) { return wick::testing::test_data_dir() + "/sd3/" + name; }

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
    .latent_channels = 16, .latent_sizes = {{8, 8}}, .text_length = 7, .text_dim = 32, .pooled_dim = 64};

// The tiny medium model as `wick train` builds it: LoRA rank 4, alpha 8 on every joint-block Linear (preset all).
std::shared_ptr<DiffusionModel> build(const std::string& model_extra, const std::string& network = "lora") {
  const std::string yaml = "name: f8\ndevice: cpu\nmodel: {arch: sd3, name_or_path: " +
                           fixture_path("medium_sai.safetensors") + model_extra + "}\nnetwork: {type: " + network +
                           ", linear: 4, linear_alpha: 8}\ndataset: {path: unused.h5}\n";
  TrainConfig config = parse_config_string(yaml, "<test>", config_schema());
  return build_model(config, kTinyGeometry, Device::cpu());
}

struct Step {
  Tensor output;
  double loss = 0;
  std::vector<std::pair<std::string, Tensor>> grads;  // lora_down / lora_up per module path
};

// medium_<kind>_case's forward and backward with its LoRA factors (and DoRA magnitudes).
Step lora_step(DiffusionModel& model, bool checkpointing = false, const std::string& kind = "lora") {
  SafetensorsFile lora = SafetensorsFile::open(fixture_path("medium_" + kind + "_case.safetensors"));
  auto adapters = nn::find_adapters(model);
  EXPECT_EQ(adapters.size(), 31u);
  for (auto& [path, adapter] : adapters) {
    copy_into_slot(adapter->down_weight(), lora.get("sai." + path + ".lora_down"));
    copy_into_slot(adapter->up_weight(), lora.get("sai." + path + ".lora_up"));
    if (auto dora = std::dynamic_pointer_cast<nn::DoRALinear>(adapter))
      copy_into_slot(dora->magnitude(), lora.get("sai." + path + ".magnitude"));
  }
  auto& mmdit = dynamic_cast<MMDiT&>(model);
  mmdit.set_gradient_checkpointing(checkpointing);
  Step step;
  step.output = mmdit.forward(lora.get("latents_square"), lora.get("sigma"), lora.get("context"), lora.get("pooled"));
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

// The step against medium_float8_<kind>_case; prints the errors.
void expect_matches_reference(const Step& step, const std::string& kind) {
  SafetensorsFile want = SafetensorsFile::open(fixture_path("medium_float8_" + kind + "_case.safetensors"));
  const double out_error = relative_to_max(step.output, want.get("output"));
  const double loss_error = std::fabs(step.loss - want.get("loss").item()) / std::fabs(want.get("loss").item());
  double worst = 0;
  for (const auto& [name, grad] : step.grads) {
    ASSERT_TRUE(grad.defined()) << name;
    const double error = relative_to_max(grad, want.get("grad.sai." + name));
    EXPECT_LE(error, 1e-4) << kind << ": " << name;
    worst = std::max(worst, error);
  }
  // The quantization shows: the unquantized base's loss is another number.
  SafetensorsFile unquantized = SafetensorsFile::open(fixture_path("medium_" + kind + "_case.safetensors"));
  EXPECT_GT(std::fabs(step.loss - unquantized.get("loss").item()), 1e-4) << kind;
  std::printf("[SD3 float8 %s] output %.3g, loss %.9g vs %.9g (%.3g), worst of %zu adapter gradients %.3g\n",
              kind.c_str(), out_error, step.loss, want.get("loss").item(), loss_error, step.grads.size(), worst);
  EXPECT_LE(out_error, 1e-5) << kind;
  EXPECT_LE(loss_error, 1e-5) << kind;
}

TEST(Sd3Float8, QuantizedAtLoadLoraGradientsMatchDequantizingReference) {
  std::shared_ptr<DiffusionModel> model = build(", quantize: float8");
  // Every joint-block Linear; x_embedder (a convolution), the embedders and the final layer stay f32.
  EXPECT_EQ(count_float8_layers(*model), 31);
  for (const auto& [name, tensor] : model->named_parameters())
    if (name.find("joint_blocks.") != 0 && name.find(".weight_scale") != std::string::npos)
      ADD_FAILURE() << name << " is float8 outside the blocks";
  expect_matches_reference(lora_step(*model), "lora");
}

// DoRA (PEFT's output-axis magnitudes, sd3's default file format) on the float8 base: the weight norm is the
// dequantized weight's plus the update's, as PEFT computes it on the dequantized base.
TEST(Sd3Float8, DoraGradientsMatchDequantizingReference) {
  std::shared_ptr<DiffusionModel> model = build(", quantize: float8", "dora");
  EXPECT_EQ(count_float8_layers(*model), 31);
  expect_matches_reference(lora_step(*model, false, "dora"), "dora");
}

TEST(Sd3Float8, PerTensorScalesAndCheckpointing) {
  std::shared_ptr<DiffusionModel> model = build(", quantize: float8, quantize_scale: per_tensor");
  int n_scales = 0;
  for (const auto& [name, tensor] : model->named_parameters())
    if (name.find(".weight_scale") != std::string::npos) {
      EXPECT_EQ(tensor.numel(), 1) << name;
      ++n_scales;
    }
  EXPECT_EQ(n_scales, 31);
  const Step plain = lora_step(*model), checkpointed = lora_step(*model, true);
  EXPECT_EQ(plain.loss, checkpointed.loss);
  ASSERT_EQ(plain.grads.size(), checkpointed.grads.size());
  for (size_t i = 0; i < plain.grads.size(); ++i)
    EXPECT_EQ(plain.grads[i].second.to_vector<float>(), checkpointed.grads[i].second.to_vector<float>())
        << plain.grads[i].first;
  // Per-tensor scales quantize a fused qkv as one tensor: close to the per-row reference, not equal.
  const SafetensorsFile want = SafetensorsFile::open(fixture_path("medium_float8_lora_case.safetensors"));
  const double loss_error = std::fabs(plain.loss - want.get("loss").item());
  EXPECT_GT(loss_error, 0.0);
  EXPECT_LT(loss_error, 0.05);
}

TEST(Sd3Float8, FullFineTuningOfAFloat8BaseIsRefused) {
  try {
    build(", quantize: float8", "full");
    ADD_FAILURE() << "full fine-tuning of a float8 base was accepted";
  } catch (const WickError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Config);
    EXPECT_THAT(e.what(), HasSubstr("network.type full"));
  }
}

}  // namespace
}  // namespace wick::sd3
