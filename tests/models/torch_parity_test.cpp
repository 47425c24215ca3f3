// Parity with PyTorch: forward and backward of an MLP (cross-entropy) and of a pre-norm transformer
// block with LoRA on attn.qkv and mlp.fc1 (MSE), against fixtures written by
// tests/reference/make_torch_parity_fixtures.py (torch 2.15, f32, one thread).
//
// Metric, per tensor: max_i |wick_i - torch_i| / max_i |torch_i| (the error relative to the tensor's
// largest magnitude), required <= 1e-5 for the loss, every parameter's gradient and the input's.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "engine/autograd/backward.h"
#include "engine/autograd/node.h"
#include "engine/autograd/ops_elementwise.h"
#include "engine/autograd/ops_loss.h"
#include "engine/init.h"
#include "engine/module.h"
#include "models/nn/adapters.h"
#include "models/nn/attention.h"
#include "models/nn/basic.h"
#include "models/nn/norm.h"
#include "runtime/safetensors.h"

namespace wick {
namespace {

constexpr double kTolerance = 1e-5;

SafetensorsFile open_fixture(const std::string& name) {
  return SafetensorsFile::open(std::string(WICK_TEST_DATA_DIR) + "/parity/" + name);
}

// max |got - want| / max |want| (or the absolute error when want is all zeros).
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

// Loads the fixture's parameters (all trainable) and the input (requiring a gradient), runs
// `loss_of`, differentiates, and checks the loss and every gradient against torch's.
template <typename LossFn>
void check_against_torch(Module& model, const std::string& fixture_name, LossFn loss_of) {
  SafetensorsFile file = open_fixture(fixture_name);
  LoadReport report = load_parameters(model, file, /*strict=*/true, /*trainable=*/true, "param.");
  ASSERT_FALSE(report.loaded.empty());
  Tensor x = file.get("input").to(DType::F32);  // a private copy: the input becomes a leaf
  autograd::set_requires_grad(x, true, "input");

  Tensor loss = loss_of(x, file.get("target"));
  double loss_error = relative_to_max(loss, file.get("loss"));
  std::printf("[%s] loss wick %.9g torch %.9g, relative error %.3g\n", fixture_name.c_str(), loss.item(),
              file.get("loss").item(), loss_error);
  EXPECT_LE(loss_error, kTolerance);

  autograd::GradientStore grads = autograd::backward(loss);
  double worst = 0;
  std::string worst_name;
  int n_checked = 0;
  auto check = [&](const std::string& name, const Tensor& leaf) {
    Tensor want = file.get("grad." + name);
    Tensor got = grads.get(leaf);
    ASSERT_TRUE(got.defined()) << name << " got no gradient";
    double error = relative_to_max(got, want);
    EXPECT_LE(error, kTolerance) << "gradient of " << name;
    if (error > worst) worst = error, worst_name = name;
    ++n_checked;
  };
  for (const auto& [name, tensor] : model.named_parameters()) check(name, tensor);
  check("input", x);
  // Every gradient the fixture holds was compared.
  int n_in_file = 0;
  for (const std::string& name : file.names()) n_in_file += name.rfind("grad.", 0) == 0;
  EXPECT_EQ(n_checked, n_in_file);
  std::printf("[%s] %d gradients, worst relative error %.3g (%s)\n", fixture_name.c_str(), n_checked, worst,
              worst_name.c_str());
}

TEST(TorchParity, MlpCrossEntropyForwardAndBackward) {
  set_init_seed(1);
  auto mlp = std::make_shared<nn::Sequential>();
  mlp->add(std::make_shared<nn::Linear>(784, 16));
  mlp->add(std::make_shared<nn::Activation>("relu"));
  mlp->add(std::make_shared<nn::Linear>(16, 10));
  check_against_torch(*mlp, "mlp.safetensors", [&](const Tensor& x, const Tensor& labels) {
    return autograd::cross_entropy_with_logits(mlp->forward(x), labels);
  });
}

// x -> norm1 -> attn -> + x -> norm2 -> mlp -> + (the fixture script's block).
class PreNormBlock : public Module {
 public:
  PreNormBlock(int64_t dim, int64_t heads, int64_t hidden) {
    register_module("norm1", std::make_shared<nn::LayerNorm>(Shape{dim}));
    register_module("attn", std::make_shared<nn::MultiHeadAttention>(dim, heads));
    register_module("norm2", std::make_shared<nn::LayerNorm>(Shape{dim}));
    register_module("mlp", std::make_shared<nn::MLP>(dim, hidden, "gelu_tanh"));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = autograd::add(x, child("attn")->forward(child("norm1")->forward(x)));
    return autograd::add(h, child("mlp")->forward(child("norm2")->forward(h)));
  }
};

TEST(TorchParity, PreNormBlockWithLoRAForwardAndBackward) {
  set_init_seed(2);
  auto block = std::make_shared<PreNormBlock>(32, 4, 64);
  nn::AdapterReport adapters =
      nn::apply_adapters(*block, {.type = "lora", .patterns = {"attn.qkv", "mlp.fc1"}, .options = {.rank = 4, .alpha = 8.0}});
  ASSERT_THAT(adapters.wrapped, ::testing::ElementsAre("attn.qkv", "mlp.fc1"));
  check_against_torch(*block, "block.safetensors", [&](const Tensor& x, const Tensor& target) {
    return autograd::mse_loss(block->forward(x), target);
  });
  // The fixture's names are exactly wick's (strict load), including the adapters'.
  std::vector<std::string> names;
  for (const auto& [name, tensor] : block->named_parameters()) names.push_back(name);
  EXPECT_THAT(names, ::testing::Contains("attn.qkv.lora_down.weight"));
  EXPECT_THAT(names, ::testing::Contains("mlp.fc1.lora_up.weight"));
}

}  // namespace
}  // namespace wick
