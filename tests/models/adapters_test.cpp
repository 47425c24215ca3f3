// Adapters: PEFT parity of the output-axis DoRA (Linear) and of LoRA on Conv2d (fixtures written by
// tests/reference/make_adapter_fixtures.py with PEFT's own layers), merge/unmerge, the dropout rule of
// the output-axis DoRA, the fused-vs-split property, and the adapter registry's errors. Finite-difference
// gradient checks of both layers are table entries in tests/engine/grad_adapter_cases.cpp.
//
// Metric, per tensor: max_i |wick_i - peft_i| / max_i |peft_i|; the output, loss and merged weight
// must be within 1e-5, the gradients within 1e-4.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "engine/autograd/backward.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/autograd/ops_dropout.h"
#include "engine/autograd/ops_elementwise.h"
#include "engine/autograd/ops_join.h"
#include "engine/autograd/ops_loss.h"
#include "engine/autograd/ops_matmul.h"
#include "engine/autograd/rng_state.h"
#include "engine/init.h"
#include "models/nn/adapters.h"
#include "models/nn/norm.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/random.h"
#include "runtime/ops/reduce.h"
#include "runtime/safetensors.h"
#include "tests/test_data.h"

namespace wick {
namespace {

using ::testing::HasSubstr;

constexpr double kOutputTolerance = 1e-5, kGradientTolerance = 1e-4;

SafetensorsFile open_fixture(const std::string& name) {
  return SafetensorsFile::open(testing::test_data_dir() + "/adapters/" + name);
}

Tensor random_input(const Shape& shape, uint64_t seed) {
  return randn(shape, derive_stream(seed, 0, 0, RngPurpose::Test));
}

// max |got - want| / max |want| (the absolute error when want is all zeros).
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

double max_abs_diff(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(x[i] - y[i]));
  return worst;
}

// Copies every param.<name> of the fixture into the module's slot of that name (keeping the slots'
// trainable flags: the base frozen, the adapter trainable).
void copy_parameters(Module& module, const SafetensorsFile& file) {
  autograd::NoGradGuard no_grad;
  for (const auto& [name, tensor] : module.named_parameters()) {
    ASSERT_TRUE(file.contains("param." + name)) << name;
    module.parameter(name).copy_from(file.get("param." + name));
  }
}

// Runs `forward` on the fixture's input, differentiates mean((y - target)^2), and checks the output,
// the loss, each named adapter parameter's gradient and the input's against the fixture.
template <typename Forward>
void check_against_peft(Module& module, const SafetensorsFile& file, const std::string& label,
                        const std::vector<std::string>& trainable, Forward forward) {
  Tensor x = file.get("input").clone();
  autograd::set_requires_grad(x, true, "input");
  Tensor y = forward(x);
  Tensor loss = autograd::mse_loss(y, file.get("target"));
  double output_error = relative_to_max(y, file.get("output"));
  double loss_error = relative_to_max(loss, file.get("loss"));
  EXPECT_LE(output_error, kOutputTolerance) << label << " output";
  EXPECT_LE(loss_error, kOutputTolerance) << label << " loss";
  autograd::GradientStore grads = autograd::backward(loss);
  double worst = 0;
  std::string worst_name;
  for (const std::string& name : trainable) {
    Tensor got = name == "input" ? grads.get(x) : grads.get(module.parameter(name));
    ASSERT_TRUE(got.defined()) << label << ": " << name << " got no gradient";
    double error = relative_to_max(got, file.get("grad." + name));
    EXPECT_LE(error, kGradientTolerance) << label << ": gradient of " << name;
    if (error >= worst) worst = error, worst_name = name;
  }
  std::printf("[%s] output %.3g, loss %.3g, worst gradient %.3g (%s) relative to PEFT\n", label.c_str(), output_error,
              loss_error, worst, worst_name.c_str());
}

std::shared_ptr<nn::DoRALinear> output_axis_dora(int64_t in, int64_t out, double dropout = 0.0) {
  return std::make_shared<nn::DoRALinear>(
      std::make_shared<nn::Linear>(in, out),
      nn::AdapterOptions{.rank = 4, .alpha = 8.0, .dropout = dropout, .dora_axis = nn::DoraAxis::Output});
}

TEST(Adapters, OutputAxisDoRAMatchesPeftForwardBackwardAndMerge) {
  set_init_seed(1);
  SafetensorsFile file = open_fixture("dora_linear.safetensors");
  auto dora = output_axis_dora(12, 10);
  std::vector<std::string> names;
  for (const auto& [name, tensor] : dora->named_parameters()) names.push_back(name);
  EXPECT_THAT(names, ::testing::ElementsAre("weight", "bias", "magnitude", "lora_down.weight", "lora_up.weight"));
  copy_parameters(*dora, file);
  check_against_peft(*dora, file, "dora_linear", {"lora_down.weight", "lora_up.weight", "magnitude", "input"},
                     [&](const Tensor& x) { return dora->forward(x); });

  Tensor x = file.get("input");
  Tensor adapted = dora->forward(x);
  Tensor original = dora->base().weight_.clone();
  dora->merge();
  double merge_error = relative_to_max(dora->base().weight_, file.get("merged.weight"));
  std::printf("[dora_linear] merged weight %.3g relative to PEFT's merge_adapter\n", merge_error);
  EXPECT_LE(merge_error, kOutputTolerance);
  EXPECT_LE(relative_to_max(dora->forward(x), adapted), kOutputTolerance) << "merged forward = adapter forward";
  dora->unmerge();
  EXPECT_EQ(dora->base().weight_.to_vector<float>(), original.to_vector<float>()) << "unmerge restores W exactly";
  EXPECT_EQ(dora->forward(x).to_vector<float>(), adapted.to_vector<float>());
}

// PEFT with lora_dropout in training: base(x) + (m/n - 1) (x_d W^T) + (m/n) s (x_d A^T B^T), which is
// base(x) + dora_eval(x_d) - x_d W^T - b. The fixture fixes the mask; wick's own mask is replayed.
TEST(Adapters, OutputAxisDoRADropoutFollowsPeft) {
  set_init_seed(2);
  SafetensorsFile file = open_fixture("dora_linear_dropout.safetensors");
  auto dora = output_axis_dora(12, 10, 0.25);
  copy_parameters(*dora, file);
  auto peft_rule = [&](const Tensor& x, const Tensor& dropped) {
    dora->eval();  // no dropout: (m/n) ⊙ (x_d Wc^T) + b
    Tensor dora_part = dora->forward(dropped);
    dora->train();
    Tensor base_of_dropped = autograd::linear(dropped, dora->base().weight_, dora->base().bias_);
    return autograd::add(dora->base().forward(x), autograd::sub(dora_part, base_of_dropped));
  };
  Tensor multiplier = file.get("dropout_multiplier");
  check_against_peft(*dora, file, "dora_linear_dropout",
                     {"lora_down.weight", "lora_up.weight", "magnitude", "input"},
                     [&](const Tensor& x) { return peft_rule(x, autograd::mul(x, multiplier)); });

  // wick's training forward is that rule with the mask from the engine's cursor.
  Tensor x = file.get("input").clone();
  autograd::set_requires_grad(x, true, "input");
  autograd::RngCursor snapshot = autograd::current_rng();
  Tensor y = dora->forward(x);
  Tensor expected;
  {
    autograd::RngCursorGuard replay(snapshot);
    expected = peft_rule(x, autograd::dropout(x, 0.25, true));
  }
  EXPECT_LT(max_abs_diff(y, expected), 1e-6);
  EXPECT_GT(max_abs_diff(y, dora->forward(x)), 1e-3) << "another draw, another mask";
  Tensor seed = random_input(y.shape(), 3);
  autograd::GradientStore got = autograd::backward(y, seed), want = autograd::backward(expected, seed);
  for (const char* name : {"lora_down.weight", "lora_up.weight", "magnitude"})
    EXPECT_LT(max_abs_diff(got.get(dora->parameter(name)), want.get(dora->parameter(name))), 1e-6) << name;
  EXPECT_LT(max_abs_diff(got.get(x), want.get(x)), 1e-6);
  dora->eval();
  EXPECT_LT(max_abs_diff(dora->forward(x), autograd::linear(x, dora->effective_weight(DType::F32), dora->base().bias_)),
            1e-6)
      << "no dropout in eval";
}

TEST(Adapters, LoRAConv2dMatchesPeftForwardBackwardAndMerge) {
  for (int64_t stride : {1, 2}) {
    set_init_seed(4);
    const std::string name = stride == 1 ? "lora_conv" : "lora_conv_stride2";
    SafetensorsFile file = open_fixture(name + ".safetensors");
    auto lora = std::make_shared<nn::LoRAConv2d>(
        std::make_shared<nn::Conv2d>(6, 8, 3, nn::Conv2dOptions{.stride = stride, .padding = 1}),
        nn::AdapterOptions{.rank = 4, .alpha = 8.0});
    copy_parameters(*lora, file);
    check_against_peft(*lora, file, name, {"lora_down.weight", "lora_up.weight", "input"},
                       [&](const Tensor& x) { return lora->forward(x); });
    Tensor x = file.get("input");
    Tensor adapted = lora->forward(x);
    Tensor original = lora->base().weight_.clone();
    lora->merge();
    double merge_error = relative_to_max(lora->base().weight_, file.get("merged.weight"));
    std::printf("[%s] merged weight %.3g relative to PEFT's merge_adapter\n", name.c_str(), merge_error);
    EXPECT_LE(merge_error, kOutputTolerance);
    EXPECT_LE(relative_to_max(lora->forward(x), adapted), kOutputTolerance) << name;
    lora->unmerge();
    EXPECT_LT(max_abs_diff(lora->base().weight_, original), 1e-6) << name;
    EXPECT_LE(relative_to_max(lora->forward(x), adapted), kOutputTolerance) << name;
  }
}

TEST(Adapters, LoRAConv2dLayoutInitAndErrors) {
  set_init_seed(5);
  auto conv = std::make_shared<nn::Conv2d>(4, 6, 3, nn::Conv2dOptions{.padding = 2, .dilation = 2});
  Tensor x = random_input({2, 4, 7, 9}, 6);
  Tensor before = conv->forward(x);
  auto lora = std::make_shared<nn::LoRAConv2d>(conv, nn::AdapterOptions{.rank = 3, .alpha = 6.0});
  std::vector<std::string> names;
  for (const auto& [name, tensor] : lora->named_parameters()) names.push_back(name);
  EXPECT_THAT(names, ::testing::ElementsAre("weight", "bias", "lora_down.weight", "lora_up.weight"));
  EXPECT_EQ(lora->down_weight().shape(), (Shape{3, 4, 3, 3}));
  EXPECT_EQ(lora->up_weight().shape(), (Shape{6, 3, 1, 1}));
  EXPECT_EQ(lora->trainable_parameters().size(), 2u);
  const double bound = 1.0 / std::sqrt(4.0 * 9.0);
  EXPECT_LE(wick::max(wick::abs(lora->down_weight())).item(), bound);
  EXPECT_GT(wick::max(wick::abs(lora->down_weight())).item(), 0.5 * bound);
  EXPECT_EQ(lora->forward(x).to_vector<float>(), before.to_vector<float>()) << "up is zero-initialized";
  // With the base's dilation in the down conv, merging is exact for a dilated conv too.
  lora->up_weight().copy_from(random_input({6, 3, 1, 1}, 7));
  Tensor adapted = lora->forward(x);
  EXPECT_GT(max_abs_diff(adapted, before), 1e-2);
  lora->merge();
  EXPECT_LT(max_abs_diff(lora->forward(x), adapted), 1e-5);
  lora->unmerge();
  EXPECT_LT(max_abs_diff(conv->forward(x), before), 1e-5);

  auto grouped = std::make_shared<nn::Conv2d>(4, 6, 3, nn::Conv2dOptions{.groups = 2});
  try {
    nn::LoRAConv2d bad(grouped, {.rank = 2});
    FAIL() << "expected an error";
  } catch (const WickError& error) {
    EXPECT_THAT(error.what(), HasSubstr("groups = 2"));
  }
  auto pointwise = std::make_shared<nn::Conv2d>(2, 8, 1);
  EXPECT_THROW(nn::LoRAConv2d(pointwise, {.rank = 3}), WickError) << "rank > in·kh·kw";
}

TEST(Adapters, OutputAxisDoRAStartsAsTheBaseWithRowNorms) {
  set_init_seed(8);
  auto base = std::make_shared<nn::Linear>(5, 3);
  Tensor x = random_input({4, 5}, 9);
  Tensor before = base->forward(x);
  auto dora = std::make_shared<nn::DoRALinear>(
      base, nn::AdapterOptions{.rank = 2, .alpha = 2.0, .dora_axis = nn::DoraAxis::Output});
  EXPECT_EQ(dora->magnitude_.shape(), (Shape{3}));
  EXPECT_FALSE(dora->dora_scale_.defined());
  EXPECT_EQ(&dora->magnitude(), &dora->magnitude_);
  Tensor row_norms = wick::sqrt(wick::sum(wick::square(base->weight_), {1}));
  EXPECT_LT(max_abs_diff(dora->magnitude_, row_norms), 1e-6);
  EXPECT_LT(max_abs_diff(dora->forward(x), before), 1e-5);
  // With an update, each row of W' has norm m; the bias is not scaled.
  dora->up_weight().copy_from(random_input({3, 2}, 10));
  dora->magnitude_.copy_from(wick::mul(row_norms, 1.5));
  Tensor w = dora->effective_weight(DType::F32);
  EXPECT_LT(max_abs_diff(wick::sqrt(wick::sum(wick::square(w), {1})), dora->magnitude_), 1e-5);
  EXPECT_LT(max_abs_diff(dora->forward(wick::zeros({1, 5})), base->bias_.reshape({1, 3})), 1e-6);
  // The input axis keeps refusing dropout; the output axis takes it.
  EXPECT_THROW(nn::DoRALinear(std::make_shared<nn::Linear>(5, 3), {.rank = 2, .dropout = 0.1}), WickError);
  EXPECT_NO_THROW(nn::DoRALinear(std::make_shared<nn::Linear>(5, 3),
                                 {.rank = 2, .dropout = 0.1, .dora_axis = nn::DoraAxis::Output}));
}

// A fused qkv Linear with one output-axis DoRA == three DoRAs on its row blocks, sharing down (A)
// and splitting up (B) and the magnitude by rows: PEFT's split q/k/v DoRAs.
TEST(Adapters, OutputAxisDoRAOnAFusedLayerEqualsSplitDoRAsWithEqualDown) {
  set_init_seed(11);
  const int64_t in = 6, part = 4, rank = 2;
  auto fused = std::make_shared<nn::DoRALinear>(
      std::make_shared<nn::Linear>(in, 3 * part),
      nn::AdapterOptions{.rank = rank, .alpha = 4.0, .dora_axis = nn::DoraAxis::Output});
  fused->up_weight().copy_from(random_input({3 * part, rank}, 12));
  fused->magnitude_.copy_from(wick::mul(fused->magnitude_, 1.25));
  Tensor x = random_input({3, in}, 13);
  std::vector<Tensor> parts;
  for (int64_t p = 0; p < 3; ++p) {
    auto base = std::make_shared<nn::Linear>(in, part);
    base->weight_.copy_from(fused->base().weight_.narrow(0, p * part, part));
    base->bias_.copy_from(fused->base().bias_.narrow(0, p * part, part));
    auto split = std::make_shared<nn::DoRALinear>(base, fused->options());
    split->down_weight().copy_from(fused->down_weight());
    split->up_weight().copy_from(fused->up_weight().narrow(0, p * part, part));
    split->magnitude_.copy_from(fused->magnitude_.narrow(0, p * part, part));
    parts.push_back(split->forward(x));
  }
  EXPECT_LT(max_abs_diff(fused->forward(x), autograd::concat(parts, 1)), 1e-6);
}

// A module with a Conv2d and Linears, for the registry.
class ConvThenLinear : public Module {
 public:
  ConvThenLinear() {
    register_module("conv_in", std::make_shared<nn::Conv2d>(3, 8, 3, nn::Conv2dOptions{.padding = 1}));
    register_module("norm", std::make_shared<nn::GroupNorm>(2, 8));
    register_module("proj", std::make_shared<nn::Linear>(8, 4));
    register_module("head", std::make_shared<nn::Linear>(4, 2));
  }
};

TEST(Adapters, RegistryWrapsTheKindsEachTypeSupports) {
  std::vector<std::string> names;
  for (const nn::AdapterType& type : nn::adapter_types()) names.push_back(type.name);
  EXPECT_THAT(names, ::testing::ElementsAre("lora", "dora"));
  EXPECT_EQ(nn::adapter_type("lora").kind_names(), "Linear, Conv2d");
  EXPECT_EQ(nn::adapter_type("dora").kind_names(), "Linear");

  set_init_seed(14);
  auto model = std::make_shared<ConvThenLinear>();
  nn::AdapterReport report = nn::apply_adapters(*model, {.type = "lora", .patterns = {"*"}, .options = {.rank = 2}});
  EXPECT_THAT(report.wrapped, ::testing::ElementsAre("conv_in", "proj", "head"));
  auto adapters = nn::find_adapters(*model);
  ASSERT_EQ(adapters.size(), 3u);
  EXPECT_EQ(adapters[0].second->type_name(), "LoRAConv2d");
  EXPECT_EQ(adapters[0].second->up_weight().shape(), (Shape{8, 2, 1, 1}));
  EXPECT_EQ(adapters[1].second->type_name(), "LoRALinear");
  EXPECT_EQ(report.n_trainable, (2 * 3 * 9 + 8 * 2) + (2 * 8 + 4 * 2) + (2 * 4 + 2 * 2));

  // dora on "*" wraps the Linears and leaves the conv: the pattern also matched layers it wraps.
  auto other = std::make_shared<ConvThenLinear>();
  report = nn::apply_adapters(*other, {.type = "dora", .patterns = {"*"}, .options = {.rank = 2}});
  EXPECT_THAT(report.wrapped, ::testing::ElementsAre("proj", "head"));
}

TEST(Adapters, RegistryErrorsNameTypesAndKinds) {
  auto model = std::make_shared<ConvThenLinear>();
  try {
    nn::apply_adapters(*model, {.type = "lokr", .patterns = {"*"}});
    FAIL() << "expected an error";
  } catch (const WickError& error) {
    EXPECT_EQ(error.kind(), ErrorKind::Config);
    EXPECT_THAT(error.what(), HasSubstr("'lokr'"));
    EXPECT_THAT(error.what(), HasSubstr("lora, dora"));
  }
  try {
    nn::apply_adapters(*model, {.type = "dora", .patterns = {"conv_*", "proj"}, .options = {.rank = 2}});
    FAIL() << "expected an error";
  } catch (const WickError& error) {
    EXPECT_EQ(error.kind(), ErrorKind::Config);
    EXPECT_THAT(error.what(), HasSubstr("'conv_*' matches only 1 Conv2d (e.g. conv_in)"));
    EXPECT_THAT(error.what(), HasSubstr("dora wraps Linear"));
    EXPECT_THAT(error.what(), HasSubstr("Conv2d: lora"));
  }
  EXPECT_TRUE(nn::find_adapters(*model).empty()) << "a refused apply_adapters leaves the model as it was";
  EXPECT_EQ(model->n_parameters(/*trainable_only=*/true), model->n_parameters());
  try {
    nn::apply_adapters(*model, {.type = "dora", .patterns = {"norm"}});
    FAIL() << "expected an error";
  } catch (const WickError& error) {
    EXPECT_THAT(error.what(), HasSubstr("matched no Linear layer"));
    EXPECT_THAT(error.what(), HasSubstr("proj, head"));
  }
  try {
    nn::apply_adapters(*model, {.type = "lora", .patterns = {"nothing"}});
    FAIL() << "expected an error";
  } catch (const WickError& error) {
    EXPECT_THAT(error.what(), HasSubstr("matched no Linear or Conv2d layer"));
    EXPECT_THAT(error.what(), HasSubstr("conv_in, proj, head"));
  }
}

}  // namespace
}  // namespace wick
