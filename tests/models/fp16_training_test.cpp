// fp16 training with dynamic loss scaling end to end: an oversized scale overflows the f16
// activations' gradients, the step is skipped and counted and the scale halves until the steps
// are clean; training then lowers the loss like the f32 run.
#include <gtest/gtest.h>

#include "engine/autograd/backward.h"
#include "engine/autograd/ops_layout.h"
#include "engine/autograd/ops_loss.h"
#include "engine/init.h"
#include "engine/optim/loss_scaler.h"
#include "engine/optim/optimizer.h"
#include "models/nn/basic.h"
#include "runtime/ops/random.h"

namespace wick {
namespace {

TEST(Fp16Training, LossScalerSkipsOverflowingStepsAndTrains) {
  set_init_seed(21);
  auto mlp = std::make_shared<nn::Sequential>();
  mlp->add(std::make_shared<nn::Linear>(16, 32)).add(std::make_shared<nn::Activation>("gelu_tanh"));
  mlp->add(std::make_shared<nn::Linear>(32, 4));
  Tensor x = randn({64, 16}, derive_stream(1, 0, 0, RngPurpose::Test));
  Tensor labels = Tensor::from_vector<int64_t>(std::vector<int64_t>(64, 0), {64});
  std::vector<int64_t> values(64);
  std::vector<float> xs = x.to_vector<float>();
  for (int i = 0; i < 64; ++i) values[i] = (xs[i * 16] > 0) + 2 * (xs[i * 16 + 1] > 0);  // learnable classes
  labels = Tensor::from_vector<int64_t>(values, {64});

  auto optimizer = make_optimizer("adamw", mlp->trainable_parameters(), {});
  LossScaler scaler({.initial_scale = 16777216.0});  // 2^24: too large, f16 gradients overflow at first
  double first_loss = 0, last_loss = 0;
  int n_applied = 0;
  for (int step = 0; step < 60; ++step) {
    Tensor logits = mlp->forward(x.to(DType::F16));
    Tensor loss = autograd::cross_entropy_with_logits(autograd::to_dtype(logits, DType::F32), labels);
    if (step == 0) first_loss = loss.item();
    last_loss = loss.item();
    autograd::GradientStore grads;
    autograd::backward(loss, grads, autograd::GradientMode::Overwrite, scaler.loss_gradient(loss));
    bool finite = scaler.unscale_and_check(grads);
    if (finite) {
      optimizer->step(grads, 1e-2f);
      ++n_applied;
    }
    scaler.update(finite);
  }
  EXPECT_GT(scaler.n_skipped(), 0) << "the oversized initial scale must overflow";
  EXPECT_LT(scaler.scale(), 16777216.0);
  EXPECT_EQ(scaler.n_skipped() + n_applied, 60);
  EXPECT_GT(n_applied, 20);
  EXPECT_LT(last_loss, 0.7 * first_loss) << "first " << first_loss << " last " << last_loss;
}

}  // namespace
}  // namespace wick
