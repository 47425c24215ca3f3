// Layers: shapes, parameter names, LoRA/DoRA semantics (merge, zero-init, adapters by pattern),
// attention against an explicit composition, gradients flowing to the right parameters.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "engine/autograd/backward.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/autograd/ops_reduce.h"
#include "engine/init.h"
#include "models/nn/adapters.h"
#include "models/nn/attention.h"
#include "models/nn/basic.h"
#include "models/nn/conv.h"
#include "models/nn/norm.h"
#include "runtime/ops/attention.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/matmul.h"
#include "runtime/ops/random.h"
#include "runtime/ops/reduce.h"
#include "runtime/ops/softmax.h"

namespace wick {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

Tensor random_input(const Shape& shape, uint64_t seed) {
  return randn(shape, derive_stream(seed, 0, 0, RngPurpose::Test));
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(x[i] - y[i]));
  return worst;
}

std::vector<std::string> names_of(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<std::string> out;
  for (const auto& [name, tensor] : named) out.push_back(name);
  return out;
}

class TinyBlock : public Module {
 public:
  TinyBlock() {
    register_module("attn", std::make_shared<nn::MultiHeadAttention>(8, 2));
    register_module("mlp", std::make_shared<nn::MLP>(8, 16));
  }
  Tensor forward(const Tensor& x) override {
    return child("mlp")->forward(child("attn")->forward(x));
  }
};

TEST(Layers, LinearMatchesExplicitProductAndTorchInitBounds) {
  set_init_seed(1);
  nn::Linear fc(5, 3);
  Tensor x = random_input({4, 5}, 2);
  Tensor y = fc.forward(x);
  Tensor expected = wick::add(wick::matmul(x, fc.weight_, false, true), fc.bias_);
  EXPECT_LT(max_abs_diff(y, expected), 1e-6);
  double bound = 1.0 / std::sqrt(5.0);
  EXPECT_LE(wick::max(wick::abs(fc.weight_)).item(), bound);
  EXPECT_GT(wick::max(wick::abs(fc.weight_)).item(), 0.5 * bound);
  EXPECT_THAT(names_of(fc.named_parameters()), ElementsAre("weight", "bias"));
}

TEST(Layers, InitIsReproducibleFromTheSeed) {
  set_init_seed(7);
  nn::Linear a(6, 6);
  set_init_seed(7);
  nn::Linear b(6, 6);
  EXPECT_EQ(a.weight_.to_vector<float>(), b.weight_.to_vector<float>());
  nn::Linear c(6, 6);
  EXPECT_NE(a.weight_.to_vector<float>(), c.weight_.to_vector<float>());
}

TEST(Layers, LoRAStartsAsTheBaseAndMergesExactly) {
  set_init_seed(3);
  auto base = std::make_shared<nn::Linear>(6, 4);
  Tensor x = random_input({2, 6}, 4);
  Tensor before = base->forward(x);
  auto lora = std::make_shared<nn::LoRALinear>(base, nn::AdapterOptions{.rank = 2, .alpha = 4.0});
  EXPECT_THAT(names_of(lora->named_parameters()), ElementsAre("weight", "bias", "lora_down.weight", "lora_up.weight"));
  EXPECT_THAT(names_of(lora->trainable_parameters()), ElementsAre("lora_down.weight", "lora_up.weight"));
  EXPECT_EQ(lora->forward(x).to_vector<float>(), before.to_vector<float>()) << "up is zero-initialized";

  lora->up_weight().copy_from(random_input({4, 2}, 5));
  Tensor adapted = lora->forward(x);
  Tensor delta = wick::mul(wick::matmul(lora->up_weight(), lora->down_weight()), 2.0);  // alpha / rank = 2
  Tensor expected = wick::add(before, wick::matmul(x, delta, false, true));
  EXPECT_LT(max_abs_diff(adapted, expected), 1e-5);
  lora->merge();
  EXPECT_LT(max_abs_diff(lora->forward(x), adapted), 1e-5);
  lora->unmerge();
  EXPECT_LT(max_abs_diff(lora->forward(x), adapted), 1e-5);
  EXPECT_LT(max_abs_diff(base->forward(x), before), 1e-5);
}

TEST(Layers, LoRAGradientsReachOnlyTheAdapters) {
  set_init_seed(9);
  auto base = std::make_shared<nn::Linear>(6, 4);
  auto lora = std::make_shared<nn::LoRALinear>(base, nn::AdapterOptions{.rank = 2, .alpha = 2.0});
  lora->up_weight().copy_from(random_input({4, 2}, 10));
  Tensor loss = autograd::sum(lora->forward(random_input({3, 6}, 11)));
  autograd::GradientStore grads = autograd::backward(loss);
  EXPECT_TRUE(grads.get(lora->down_weight()).defined());
  EXPECT_TRUE(grads.get(lora->up_weight()).defined());
  EXPECT_FALSE(grads.contains(base->weight_));
  EXPECT_FALSE(grads.contains(base->bias_));
}

TEST(Layers, DoRAStartsAsTheBaseAndMagnitudeIsPerInputColumn) {
  set_init_seed(12);
  auto base = std::make_shared<nn::Linear>(5, 3);
  Tensor x = random_input({2, 5}, 13);
  Tensor before = base->forward(x);
  auto dora = std::make_shared<nn::DoRALinear>(base, nn::AdapterOptions{.rank = 2, .alpha = 2.0});
  EXPECT_EQ(dora->dora_scale_.shape(), (Shape{1, 5}));
  EXPECT_LT(max_abs_diff(dora->forward(x), before), 1e-5);
  // With a non-zero update, W' = Wc * m / ||Wc||_col: each column of W' has norm m.
  dora->up_weight().copy_from(random_input({3, 2}, 14));
  Tensor w = dora->effective_weight(DType::F32);
  Tensor column_norms = wick::sqrt(wick::sum(wick::square(w), {0}, true));
  EXPECT_LT(max_abs_diff(column_norms, dora->dora_scale_), 1e-5);
  Tensor adapted = dora->forward(x);
  dora->merge();
  EXPECT_LT(max_abs_diff(dora->forward(x), adapted), 1e-5);
  dora->unmerge();
  EXPECT_LT(max_abs_diff(dora->forward(x), adapted), 1e-5);
  EXPECT_EQ(base->forward(x).to_vector<float>(), before.to_vector<float>()) << "unmerge restores W exactly";
  autograd::GradientStore grads = autograd::backward(autograd::sum(dora->forward(x)));
  EXPECT_TRUE(grads.get(dora->dora_scale_).defined());
  EXPECT_FALSE(grads.contains(base->weight_));
}

TEST(Layers, ApplyAdaptersByPatternKeepsBaseNames) {
  set_init_seed(15);
  auto block = std::make_shared<TinyBlock>();
  nn::AdapterReport report = nn::apply_adapters(
      *block, {.type = "lora", .patterns = {"attn.qkv", "mlp.fc*"}, .options = {.rank = 2, .alpha = 2}});
  EXPECT_THAT(report.wrapped, ElementsAre("attn.qkv", "mlp.fc1", "mlp.fc2"));
  EXPECT_EQ(report.n_trainable, (8 * 2 + 24 * 2) + (8 * 2 + 16 * 2) + (16 * 2 + 8 * 2));
  std::vector<std::string> names = names_of(block->named_parameters());
  EXPECT_THAT(names, ::testing::Contains("attn.qkv.weight"));
  EXPECT_THAT(names, ::testing::Contains("attn.qkv.lora_down.weight"));
  EXPECT_THAT(names, ::testing::Contains("mlp.fc2.lora_up.weight"));
  EXPECT_EQ(nn::find_adapters(*block).size(), 3u);
  // The wrapped block still runs, and the adapters start as identity.
  Tensor x = random_input({2, 3, 8}, 16);
  EXPECT_EQ(block->forward(x).shape(), (Shape{2, 3, 8}));
  try {
    nn::apply_adapters(*block, {.type = "lora", .patterns = {"nothing*"}});
    FAIL() << "expected an error";
  } catch (const WickError& error) {
    EXPECT_THAT(error.what(), HasSubstr("matched no Linear"));
    EXPECT_THAT(error.what(), HasSubstr("attn.proj"));
  }
  EXPECT_THROW(nn::apply_adapters(*block, {.type = "lokr", .patterns = {"*"}}), WickError);
}

TEST(Layers, AttentionMatchesAnExplicitComposition) {
  set_init_seed(17);
  nn::MultiHeadAttention attn(8, 2);
  Tensor x = random_input({2, 5, 8}, 18);
  Tensor y = attn.forward(x);
  // Explicit: qkv projection, split heads, softmax(q k^T / sqrt(d)) v, merge, proj.
  auto& qkv = *std::dynamic_pointer_cast<nn::Linear>(attn.child("qkv"));
  auto& proj = *std::dynamic_pointer_cast<nn::Linear>(attn.child("proj"));
  Tensor h = wick::add(wick::matmul(x, qkv.weight_, false, true), qkv.bias_);  // [2, 5, 24]
  auto heads = [&](int64_t part) { return h.narrow(2, part * 8, 8).reshape({2, 5, 2, 4}).transpose(1, 2); };
  Tensor scores = wick::mul(wick::matmul(heads(0), heads(1), false, true), 0.5);
  Tensor attended = wick::matmul(wick::softmax(scores, -1), heads(2));  // [2, 2, 5, 4]
  Tensor merged = attended.transpose(1, 2).reshape({2, 5, 8});
  Tensor expected = wick::add(wick::matmul(merged, proj.weight_, false, true), proj.bias_);
  EXPECT_LT(max_abs_diff(y, expected), 1e-5);
}

TEST(Layers, NormsConvEmbeddingSequential) {
  set_init_seed(19);
  Tensor x = random_input({2, 4, 6, 6}, 20);
  nn::Conv2d conv(4, 8, 3, nn::Conv2dOptions{.padding = 1});
  nn::GroupNorm gn(2, 8);
  Tensor y = gn.forward(conv.forward(x));
  EXPECT_EQ(y.shape(), (Shape{2, 8, 6, 6}));
  // GroupNorm output has per-group mean 0, variance 1 (affine is identity at init).
  Tensor group = y.reshape({2, 2, -1});
  EXPECT_LT(wick::max(wick::abs(wick::mean(group, {2}))).item(), 1e-5);
  EXPECT_LT(std::fabs(wick::mean(wick::var(group, {2}, false, 0)).item() - 1.0), 1e-3);

  nn::LayerNorm ln(Shape{6});
  EXPECT_LT(wick::max(wick::abs(wick::mean(ln.forward(x), {-1}))).item(), 1e-5);
  nn::RMSNorm rms(6);
  Tensor r = rms.forward(x);
  EXPECT_LT(std::fabs(wick::mean(wick::mean(wick::square(r), {-1})).item() - 1.0), 1e-3);

  nn::Embedding embed(10, 3);
  Tensor ids = Tensor::from_vector<int64_t>({1, 9, 1}, {3});
  Tensor e = embed.forward(ids);
  EXPECT_EQ(e.shape(), (Shape{3, 3}));
  EXPECT_EQ(e.select(0, 0).to_vector<float>(), e.select(0, 2).to_vector<float>());

  auto seq = std::make_shared<nn::Sequential>();
  seq->add(std::make_shared<nn::Flatten>()).add(std::make_shared<nn::Linear>(4 * 36, 5));
  seq->add(std::make_shared<nn::Activation>("gelu"));
  EXPECT_EQ(seq->forward(x).shape(), (Shape{2, 5}));
  EXPECT_THAT(names_of(seq->named_parameters()), ElementsAre("1.weight", "1.bias"));
  EXPECT_THROW(nn::Activation("swish"), WickError);
}

TEST(Layers, DropoutTrainsAndEvaluates) {
  nn::Dropout dropout(0.5);
  Tensor x = Tensor::from_vector<float>(std::vector<float>(1000, 1.0f), {1000});
  Tensor kept = dropout.forward(x);
  double mean = wick::mean(kept).item();
  EXPECT_NEAR(mean, 1.0, 0.15);  // inverted dropout keeps the expectation
  Tensor again = dropout.forward(x);
  EXPECT_NE(kept.to_vector<float>(), again.to_vector<float>()) << "each call draws fresh numbers";
  dropout.eval();
  EXPECT_EQ(dropout.forward(x).to_vector<float>(), x.to_vector<float>());
}

}  // namespace
}  // namespace wick
