// Mixed precision: f32 parameters, bf16 (or f16) activations. Matmuls and attention run in the
// 16-bit dtype with f32 accumulation, norms keep f32 statistics, the loss is taken in f32, and the
// gradients land in f32 close to the all-f32 run.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/autograd/backward.h"
#include "engine/autograd/ops_elementwise.h"
#include "engine/autograd/ops_layout.h"
#include "engine/autograd/ops_loss.h"
#include "engine/init.h"
#include "models/nn/adapters.h"
#include "models/nn/attention.h"
#include "models/nn/basic.h"
#include "models/nn/norm.h"
#include "runtime/ops/random.h"

namespace wick {
namespace {

class Block : public Module {
 public:
  Block() {
    register_module("norm1", std::make_shared<nn::LayerNorm>(Shape{32}));
    register_module("attn", std::make_shared<nn::MultiHeadAttention>(32, 4));
    register_module("norm2", std::make_shared<nn::RMSNorm>(32));
    register_module("mlp", std::make_shared<nn::MLP>(32, 64));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = autograd::add(x, child("attn")->forward(child("norm1")->forward(x)));
    return autograd::add(h, child("mlp")->forward(child("norm2")->forward(h)));
  }
};

double relative_error(const Tensor& got, const Tensor& want) {
  std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  double diff = 0, norm = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    diff += (g[i] - w[i]) * (g[i] - w[i]);
    norm += w[i] * w[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

void check_dtype(DType compute) {
  set_init_seed(5);
  auto block = std::make_shared<Block>();
  nn::apply_adapters(*block, {.type = "lora", .patterns = {"attn.qkv", "mlp.fc1"}, .options = {.rank = 4, .alpha = 4}});
  for (auto& [name, adapter] : nn::find_adapters(*block))
    adapter->up_weight().copy_from(normal(adapter->up_weight().shape(), 0.0, 0.1,
                                          derive_stream(1, 0, 0, RngPurpose::Test)));
  Tensor x = randn({2, 16, 32}, derive_stream(2, 0, 0, RngPurpose::Test));
  Tensor target = randn({2, 16, 32}, derive_stream(3, 0, 0, RngPurpose::Test));

  auto run = [&](DType dtype) {
    Tensor out = block->forward(x.to(dtype));
    EXPECT_EQ(out.dtype(), dtype) << "activations stay in the compute dtype";
    Tensor loss = autograd::mse_loss(autograd::to_dtype(out, DType::F32), target);  // loss in f32
    return std::make_pair(loss.item(), autograd::backward(loss));
  };
  auto [loss32, grads32] = run(DType::F32);
  auto [loss16, grads16] = run(compute);
  EXPECT_NEAR(loss16, loss32, 0.02 * loss32);
  int n_checked = 0;
  for (auto& [name, parameter] : block->trainable_parameters()) {
    Tensor g16 = grads16.get(parameter), g32 = grads32.get(parameter);
    ASSERT_TRUE(g16.defined()) << name;
    EXPECT_EQ(g16.dtype(), DType::F32) << name << ": gradients of f32 parameters are kept in f32";
    EXPECT_LT(relative_error(g16, g32), compute == DType::BF16 ? 5e-2 : 1e-2) << name;
    ++n_checked;
  }
  EXPECT_EQ(n_checked, 4);
}

TEST(MixedPrecision, Bf16ActivationsWithF32Parameters) { check_dtype(DType::BF16); }
TEST(MixedPrecision, F16ActivationsWithF32Parameters) { check_dtype(DType::F16); }

}  // namespace
}  // namespace wick
