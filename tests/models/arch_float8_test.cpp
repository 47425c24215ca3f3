// model.quantize: float8 on each architecture's tiny model (tests/models/tiny_arch.h), one row per architecture:
// LoRA (and DoRA) training on a base whose block Linears are e4m3 codes with f32 scales (per row, or one per tensor),
// against PyTorch + PEFT on the same base dequantized the same way (tests/reference/make_<arch>_float8_fixtures.py,
// Z-Image's make_zimage_fixtures.py: <cases>float8_lora_case and <cases>float8_dora_case, with the inputs, factors
// and magnitudes of <cases>lora_case / <cases>dora_case). The embedders, the output head and every convolution stay
// f32.
//
// Metric, per tensor: max_i |wick_i - ref_i| / max_i |ref_i|.
//
// A new architecture adds a row to kRows (and its TinyArch, and its float8 cases).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "engine/autograd/backward.h"
#include "engine/autograd/ops_loss.h"
#include "models/nn/conv.h"
#include "models/nn/linear.h"
#include "models/weights/float8_weights.h"
#include "runtime/error.h"
#include "tests/models/tiny_arch.h"

namespace wick {
namespace {

using ::testing::HasSubstr;
using testing::relative_to_max;
using testing::TinyArch;
using testing::tiny_arch;

struct Float8Row {
  const TinyArch* arch;
  int n_float8;              // the Linears of the blocks, quantized
  int n_convs;               // its convolutions (LoCon's included), which stay floating
  size_t n_lora_adapters;    // the adapters of lora_case (LoCon's included)
  size_t n_dora_adapters;    // those of dora_case; 0: no float8 DoRA case
  double quantization_shows;  // the float8 base's loss is further than this from the unquantized base's
  // Gradient checkpointing's gradients vs the plain ones (max-relative; 0: bitwise equal).
  double checkpointed_gradients;
  std::string float8_checkpoint;  // the base written as float8 codes and scales ("" = none committed)
};

void PrintTo(const Float8Row& row, std::ostream* os) { *os << row.arch->name; }

const Float8Row kRows[] = {
    // Every block Linear (the fused qkv, linear1, ...); the embedders and the final layer stay f32.
    {.arch = &tiny_arch("flux"), .n_float8 = 26, .n_convs = 0, .n_lora_adapters = 26, .n_dora_adapters = 0,
     .quantization_shows = 1e-5, .checkpointed_gradients = 0, .float8_checkpoint = "dev_bfl_float8.safetensors"},
    // Every joint-block Linear; x_embedder (a convolution), the embedders and the final layer stay f32.
    {.arch = &tiny_arch("sd3"), .n_float8 = 31, .n_convs = 1, .n_lora_adapters = 31, .n_dora_adapters = 31,
     .quantization_shows = 1e-4, .checkpointed_gradients = 0, .float8_checkpoint = ""},
    // 17 transformer blocks x 10 Linears, 11 transformers' proj_in and proj_out, 17 resnets' emb_layers.1;
    // time_embed and label_emb (not blocks) stay f32, and so does every convolution (LoCon's lora_down and lora_up
    // included). Checkpointing changes the order in which an input block's three consumers add their gradients
    // (SdxlLora.GradientCheckpointingGivesTheSameGradients): not bitwise.
    {.arch = &tiny_arch("sdxl"), .n_float8 = 17 * 10 + 11 * 2 + 17, .n_convs = 98, .n_lora_adapters = 257,
     .n_dora_adapters = 192, .quantization_shows = 1e-5, .checkpointed_gradients = 1e-5, .float8_checkpoint = ""},
    // 4 blocks x (to_q, to_k, to_v, to_out.0, w1, w2, w3) and the 3 modulated blocks' adaLN_modulation.0; the
    // embedders, the pad tokens and the final layer stay f32. (comfyui_fp8_scaled.safetensors has per-tensor scales,
    // not the per-row codes quantize: float8 makes: zimage_weights_test.cpp checks it.)
    {.arch = &tiny_arch("zimage"), .n_float8 = 31, .n_convs = 0, .n_lora_adapters = 14, .n_dora_adapters = 0,
     .quantization_shows = 1e-4, .checkpointed_gradients = 0, .float8_checkpoint = ""},
    // 2 blocks x 14 Linears (attention 8, the two MLPs' 4, img_mod.1 and txt_mod.1); the embedders, txt_norm,
    // norm_out and proj_out stay f32. (ComfyUI's scaled-fp8 Qwen-Image files are not read yet: qwenimage_weights.h.)
    // Measured: LoRA output 3.5e-6, loss 1.2e-6, worst gradient 1.7e-5; DoRA output 8.6e-6, worst gradient 1.9e-5;
    // the float8 base moves the loss by 5.6e-2 (8.8665 vs 8.9226).
    {.arch = &tiny_arch("qwenimage"), .n_float8 = 28, .n_convs = 0, .n_lora_adapters = 28, .n_dora_adapters = 28,
     .quantization_shows = 1e-4, .checkpointed_gradients = 0, .float8_checkpoint = ""},
};

class ArchFloat8 : public ::testing::TestWithParam<Float8Row> {};

struct Step {
  Tensor output;
  double loss = 0;
  std::vector<std::pair<std::string, Tensor>> grads;  // lora_down / lora_up (/ magnitude) per module path
};

// <cases><kind>_case's forward and backward with its factors (and DoRA magnitudes).
Step lora_step(const Float8Row& row, DiffusionModel& model, const std::string& kind, bool checkpointing = false) {
  const TinyArch& arch = *row.arch;
  SafetensorsFile inputs = SafetensorsFile::open(arch.data(arch.cases + kind + "_case.safetensors"));
  auto adapters = nn::find_adapters(model);
  EXPECT_EQ(adapters.size(), kind == "lora" ? row.n_lora_adapters : row.n_dora_adapters);
  copy_case_factors(arch, model, inputs);
  model.set_gradient_checkpointing(checkpointing);
  Step step;
  step.output = arch.forward(model, inputs);
  Tensor loss = autograd::mse_loss(arch.as_target(step.output), inputs.get("target"));
  step.loss = loss.item();
  autograd::GradientStore grads = autograd::backward(loss);
  size_t n_stored = 0;  // the factors the store has a gradient for (those the loss reaches, at least)
  auto add = [&](const std::string& name, const Tensor& slot) {
    n_stored += grads.contains(slot) ? 1 : 0;
    step.grads.emplace_back(name, testing::gradient_or_zeros(grads, slot));
  };
  for (auto& [path, adapter] : adapters) {
    add(path + ".lora_down", adapter->down_weight());
    add(path + ".lora_up", adapter->up_weight());
    if (auto dora = std::dynamic_pointer_cast<nn::DoRALinear>(adapter)) add(path + ".magnitude", dora->magnitude());
  }
  EXPECT_EQ(grads.size(), n_stored) << "only the adapters get gradients";
  return step;
}

// The step against <cases>float8_<kind>_case; prints the errors.
void expect_matches_reference(const Float8Row& row, const Step& step, const std::string& kind,
                              const std::string& how) {
  const TinyArch& arch = *row.arch;
  SafetensorsFile want = SafetensorsFile::open(arch.data(arch.cases + "float8_" + kind + "_case.safetensors"));
  const double out_error = relative_to_max(step.output, want.get("output"));
  const double loss_error = std::fabs(step.loss - want.get("loss").item()) / std::fabs(want.get("loss").item());
  double worst = 0;
  std::string worst_name;
  for (const auto& [name, grad] : step.grads) {
    const double error = testing::gradient_error(grad, want, "grad." + arch.factors + "." + name);
    EXPECT_LE(error, 1e-4) << kind << ": " << name;
    if (error > worst) worst = error, worst_name = name;
  }
  // The quantization shows: the unquantized base's loss is another number.
  SafetensorsFile unquantized = SafetensorsFile::open(arch.data(arch.cases + kind + "_case.safetensors"));
  EXPECT_GT(std::fabs(step.loss - unquantized.get("loss").item()), row.quantization_shows) << kind;
  std::printf("[%s float8 %s, %s] output %.3g, loss %.9g vs %.9g (%.3g), worst of %zu adapter gradients %.3g (%s)\n",
              arch.name.c_str(), kind.c_str(), how.c_str(), out_error, step.loss, want.get("loss").item(), loss_error,
              step.grads.size(), worst, worst_name.c_str());
  EXPECT_LE(out_error, 1e-5) << kind;
  EXPECT_LE(loss_error, 1e-5) << kind;
}

// Every weight_scale is f32, one per float8 Linear; a Linear is float8 exactly when it is inside a block (the
// adapters' own Linears stay f32); every convolution stays floating.
void expect_float8_blocks(const Float8Row& row, const DiffusionModel& model) {
  EXPECT_EQ(count_float8_layers(model), row.n_float8);
  int n_scales = 0;
  for (const auto& [name, tensor] : model.named_parameters()) {
    const std::string suffix = ".weight_scale";
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      EXPECT_EQ(tensor.dtype(), DType::F32) << name;
      ++n_scales;
    }
  }
  EXPECT_EQ(n_scales, row.n_float8);
  int n_convs = 0;
  for (const auto& [path, module] : model.named_modules()) {
    if (const auto* conv = dynamic_cast<const nn::Conv2d*>(module.get())) {
      EXPECT_TRUE(is_floating(conv->weight_.dtype())) << path;
      ++n_convs;
    }
    const bool adapter_factor = path.find(".lora_") != std::string::npos;
    if (const auto* linear = dynamic_cast<const nn::Linear*>(module.get()); linear && !adapter_factor) {
      EXPECT_EQ(linear->is_float8(), !testing::is_outside_blocks(*row.arch, path)) << path;
    }
  }
  EXPECT_EQ(n_convs, row.n_convs);
}

TEST_P(ArchFloat8, QuantizedAtLoadLoraGradientsMatchDequantizingReference) {
  const Float8Row& row = GetParam();
  std::shared_ptr<DiffusionModel> model = row.arch->build(", quantize: float8", row.arch->lora_network());
  expect_float8_blocks(row, *model);
  expect_matches_reference(row, lora_step(row, *model, "lora"), "lora", "quantized at load");
}

// DoRA (PEFT's output-axis magnitudes) on the float8 base: the weight norm is the dequantized weight's plus the
// update's, as PEFT computes it on the dequantized base.
TEST_P(ArchFloat8, DoraGradientsMatchDequantizingReference) {
  const Float8Row& row = GetParam();
  if (row.n_dora_adapters == 0)
    GTEST_SKIP() << row.arch->name << " has no float8 DoRA case (" << row.arch->cases << "float8_dora_case)";
  std::shared_ptr<DiffusionModel> model =
      row.arch->build(", quantize: float8", row.arch->lora_network("dora", "peft"));
  EXPECT_EQ(count_float8_layers(*model), row.n_float8);
  expect_matches_reference(row, lora_step(row, *model, "dora"), "dora", "quantized at load");
}

TEST_P(ArchFloat8, Float8CheckpointLoadsTheSameCodesAndTrainsTheSame) {
  const Float8Row& row = GetParam();
  const TinyArch& arch = *row.arch;
  if (row.float8_checkpoint.empty()) GTEST_SKIP() << arch.name << " has no float8 checkpoint among its fixtures";
  std::shared_ptr<DiffusionModel> at_load = arch.build(", quantize: float8", arch.lora_network());
  std::shared_ptr<DiffusionModel> from_file = arch.build("", arch.lora_network(), arch.data(row.float8_checkpoint));
  expect_float8_blocks(row, *from_file);
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
  EXPECT_EQ(n_compared, row.n_float8);
  const Step a = lora_step(row, *at_load, "lora"), b = lora_step(row, *from_file, "lora");
  expect_matches_reference(row, b, "lora", "float8 checkpoint");
  EXPECT_EQ(a.loss, b.loss);
  for (size_t i = 0; i < a.grads.size(); ++i)
    EXPECT_EQ(a.grads[i].second.to_vector<float>(), b.grads[i].second.to_vector<float>()) << a.grads[i].first;
}

TEST_P(ArchFloat8, PerTensorScalesAndCheckpointing) {
  const Float8Row& row = GetParam();
  std::shared_ptr<DiffusionModel> model =
      row.arch->build(", quantize: float8, quantize_scale: per_tensor", row.arch->lora_network());
  int n_scales = 0;
  for (const auto& [name, tensor] : model->named_parameters())
    if (name.find(".weight_scale") != std::string::npos) {
      EXPECT_EQ(tensor.numel(), 1) << name;
      ++n_scales;
    }
  EXPECT_EQ(n_scales, row.n_float8);
  const Step plain = lora_step(row, *model, "lora"), checkpointed = lora_step(row, *model, "lora", true);
  EXPECT_EQ(plain.loss, checkpointed.loss);
  ASSERT_EQ(plain.grads.size(), checkpointed.grads.size());
  for (size_t i = 0; i < plain.grads.size(); ++i) {
    if (row.checkpointed_gradients == 0) {
      EXPECT_EQ(plain.grads[i].second.to_vector<float>(), checkpointed.grads[i].second.to_vector<float>())
          << plain.grads[i].first;
    } else {
      EXPECT_LE(relative_to_max(checkpointed.grads[i].second, plain.grads[i].second), row.checkpointed_gradients)
          << plain.grads[i].first;
    }
  }
  // Per-tensor scales quantize a fused qkv as one tensor: close to the per-row reference, not equal.
  const SafetensorsFile want =
      SafetensorsFile::open(row.arch->data(row.arch->cases + "float8_lora_case.safetensors"));
  const double loss_error = std::fabs(plain.loss - want.get("loss").item());
  std::printf("[%s float8 lora, per-tensor scales] loss %.9g vs the per-row reference's %.9g\n",
              row.arch->name.c_str(), plain.loss, want.get("loss").item());
  EXPECT_GT(loss_error, 0.0);
  EXPECT_LT(loss_error, 0.05);
}

TEST_P(ArchFloat8, RefusesWhatItCannotDo) {
  const Float8Row& row = GetParam();
  const TinyArch& arch = *row.arch;
  try {
    arch.build(", quantize: float8", "network: {type: full}\n");
    ADD_FAILURE() << "full fine-tuning of a float8 base was accepted";
  } catch (const WickError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Config);
    EXPECT_THAT(e.what(), HasSubstr("network.type full"));
  }
  if (row.float8_checkpoint.empty()) return;
  try {
    arch.build("", "network: {type: full}\n", arch.data(row.float8_checkpoint));
    ADD_FAILURE() << "full fine-tuning of a float8 checkpoint was accepted";
  } catch (const WickError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Config);
    EXPECT_THAT(e.what(), HasSubstr("float8"));
  }
}

INSTANTIATE_TEST_SUITE_P(Arch, ArchFloat8, ::testing::ValuesIn(kRows), testing::RowName());

}  // namespace
}  // namespace wick
