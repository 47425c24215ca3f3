// model.quantize: float8 on the tiny Flux dev model (tests/data/flux): LoRA training on a base whose
// block Linears are e4m3 codes with per-row f32 scales, against PyTorch + PEFT on the same base
// dequantized the same way (tests/reference/make_flux_float8_fixtures.py: dev_float8_lora_case), both
// from the f32 file quantized at load and from the float8 checkpoint dev_bfl_float8.safetensors.
//
// Metric, per tensor: max_i |wick_i - ref_i| / max_i |ref_i|.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/autograd/backward.h"
#include "engine/autograd/ops_loss.h"
#include "engine/config/train_config.h"
#include "models/flux/flux.h"
#include "models/model_factory.h"
#include "models/nn/adapters.h"
#include "models/nn/linear.h"
#include "models/registry.h"
#include "runtime/error.h"
#include "runtime/ops/copy.h"
#include "runtime/safetensors.h"
#include "tests/test_data.h"

namespace wick::flux {
namespace {

using ::testing::HasSubstr;

std::string fixture_path(const std::string& name) { return wick::testing::test_data_dir() + "/flux/" + name; }

double relative_to_max(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  double worst = 0, scale = 0;
  for (size_t i = 0; i < w.size() && i < g.size(); ++i) {
    worst = std::max(worst, std::fabs(g[i] - w[i]));
    scale = std::max(scale, std::fabs(w[i]));
  }
  return scale > 0 ? worst / scale : worst;
}

const DataGeometry kTinyGeometry{
    .latent_channels = 4, .latent_sizes = {{6, 10}}, .text_length = 7, .text_dim = 32, .pooled_dim = 24};

// The tiny dev model as `wick train` builds it: LoRA rank 4, alpha 8 on every block Linear.
std::shared_ptr<DiffusionModel> build(const std::string& file, const std::string& model_extra,
                                      const std::string& network = "lora") {
  const std::string yaml = "name: f8\ndevice: cpu\nmodel: {arch: flux, axes_dim: [4, 6, 6], name_or_path: " +
                           fixture_path(file) + model_extra + "}\nnetwork: {type: " + network +
                           ", linear: 4, linear_alpha: 8}\ndataset: {path: unused.h5}\n";
  TrainConfig config = parse_config_string(yaml, "<test>", config_schema());
  return build_model(config, kTinyGeometry, Device::cpu());
}

struct Step {
  Tensor output;
  double loss = 0;
  std::vector<std::pair<std::string, Tensor>> grads;  // lora_down / lora_up per module path
};

// The fixture's forward and backward with the LoRA factors of dev_lora_case.
Step lora_step(DiffusionModel& model, bool checkpointing = false) {
  SafetensorsFile lora = SafetensorsFile::open(fixture_path("dev_lora_case.safetensors"));
  auto adapters = nn::find_adapters(model);
  EXPECT_EQ(adapters.size(), 26u);
  for (auto& [path, adapter] : adapters) {
    copy_into(adapter->down_weight(), lora.get("bfl." + path + ".lora_down"));
    copy_into(adapter->up_weight(), lora.get("bfl." + path + ".lora_up"));
  }
  auto& flux = dynamic_cast<FluxTransformer&>(model);
  flux.set_gradient_checkpointing(checkpointing);
  Step step;
  step.output = flux.forward(lora.get("latents"), lora.get("timestep"), lora.get("context"), lora.get("pooled"),
                             lora.get("guidance"));
  Tensor loss = autograd::mse_loss(pack_latents(step.output), lora.get("target"));
  step.loss = loss.item();
  autograd::GradientStore grads = autograd::backward(loss);
  for (auto& [path, adapter] : adapters) {
    step.grads.emplace_back(path + ".lora_down", grads.get(adapter->down_weight()));
    step.grads.emplace_back(path + ".lora_up", grads.get(adapter->up_weight()));
  }
  EXPECT_EQ(grads.size(), step.grads.size()) << "only the adapters get gradients";
  return step;
}

void expect_matches_reference(const Step& step, const char* label) {
  SafetensorsFile want = SafetensorsFile::open(fixture_path("dev_float8_lora_case.safetensors"));
  const double out_error = relative_to_max(step.output, want.get("output"));
  const double loss_error = std::fabs(step.loss - want.get("loss").item()) / std::fabs(want.get("loss").item());
  double worst = 0;
  for (const auto& [name, grad] : step.grads) {
    ASSERT_TRUE(grad.defined()) << name;
    const double error = relative_to_max(grad, want.get("grad.bfl." + name));
    EXPECT_LE(error, 1e-4) << label << ": " << name;
    worst = std::max(worst, error);
  }
  std::printf("[float8 LoRA, %s] output %.3g, loss %.9g vs %.9g (%.3g), worst of %zu adapter gradients %.3g\n",
              label, out_error, step.loss, want.get("loss").item(), loss_error, step.grads.size(), worst);
  EXPECT_LE(out_error, 1e-5) << label;
  EXPECT_LE(loss_error, 1e-5) << label;
}

// Float8 Linears (their weight_scale parameters; adapters wrap the Linears).
int count_float8(const Module& model) {
  int n = 0;
  for (const auto& [name, tensor] : model.named_parameters()) {
    const std::string suffix = ".weight_scale";
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      EXPECT_EQ(tensor.dtype(), DType::F32) << name;
      ++n;
    }
  }
  return n;
}

TEST(FluxFloat8, QuantizedAtLoadLoraGradientsMatchDequantizingReference) {
  std::shared_ptr<DiffusionModel> model = build("dev_bfl.safetensors", ", quantize: float8");
  EXPECT_EQ(count_float8(*model), 26);  // every block Linear; the embedders and final layer stay f32
  expect_matches_reference(lora_step(*model), "quantized at load");
}

TEST(FluxFloat8, Float8CheckpointLoadsTheSameCodesAndTrainsTheSame) {
  std::shared_ptr<DiffusionModel> at_load = build("dev_bfl.safetensors", ", quantize: float8");
  std::shared_ptr<DiffusionModel> from_file = build("dev_bfl_float8.safetensors", "");
  EXPECT_EQ(count_float8(*from_file), 26);
  SafetensorsFile file = SafetensorsFile::open(fixture_path("dev_bfl_float8.safetensors"));
  std::map<std::string, Tensor> quantized, loaded;
  for (const auto& [name, tensor] : at_load->named_parameters()) quantized[name] = tensor;
  for (const auto& [name, tensor] : from_file->named_parameters()) loaded[name] = tensor;
  int n_compared = 0;
  for (const auto& [name, tensor] : quantized) {
    if (name.find(".weight_scale") == std::string::npos) continue;
    const std::string weight = name.substr(0, name.size() - 6);  // "...weight"
    EXPECT_EQ(tensor.to_vector<float>(), loaded.at(name).to_vector<float>()) << name;
    EXPECT_EQ(quantized.at(weight).to_vector<uint8_t>(), loaded.at(weight).to_vector<uint8_t>()) << weight;
    ++n_compared;
  }
  EXPECT_EQ(n_compared, 26);
  const Step a = lora_step(*at_load), b = lora_step(*from_file);
  expect_matches_reference(b, "float8 checkpoint");
  EXPECT_EQ(a.loss, b.loss);
  for (size_t i = 0; i < a.grads.size(); ++i)
    EXPECT_EQ(a.grads[i].second.to_vector<float>(), b.grads[i].second.to_vector<float>()) << a.grads[i].first;
}

TEST(FluxFloat8, PerTensorScalesAndCheckpointing) {
  std::shared_ptr<DiffusionModel> model =
      build("dev_bfl.safetensors", ", quantize: float8, quantize_scale: per_tensor");
  for (const auto& [name, tensor] : model->named_parameters()) {
    if (name.find(".weight_scale") != std::string::npos) {
      EXPECT_EQ(tensor.numel(), 1) << name;
    }
  }
  const Step plain = lora_step(*model), checkpointed = lora_step(*model, true);
  EXPECT_EQ(plain.loss, checkpointed.loss);
  // Per-tensor scales quantize the fused qkv as one tensor: close to the per-row reference, not equal.
  const SafetensorsFile want = SafetensorsFile::open(fixture_path("dev_float8_lora_case.safetensors"));
  const double loss_error = std::fabs(plain.loss - want.get("loss").item());
  EXPECT_GT(loss_error, 0.0);
  EXPECT_LT(loss_error, 0.05);
}

TEST(FluxFloat8, RefusesWhatItCannotDo) {
  try {
    build("dev_bfl.safetensors", ", quantize: float8", "full");
    ADD_FAILURE() << "full fine-tuning of a float8 base was accepted";
  } catch (const WickError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Config);
    EXPECT_THAT(e.what(), HasSubstr("network.type full"));
  }
  try {
    build("dev_bfl_float8.safetensors", "", "full");
    ADD_FAILURE() << "full fine-tuning of a float8 checkpoint was accepted";
  } catch (const WickError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Config);
    EXPECT_THAT(e.what(), HasSubstr("float8"));
  }
}

}  // namespace
}  // namespace wick::flux
