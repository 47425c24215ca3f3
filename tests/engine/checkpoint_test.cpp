// Gradient checkpointing: the same gradients as the plain run, bitwise on the CPU, with less kept.
#include <gtest/gtest.h>

#include "engine/autograd/backward.h"
#include "engine/autograd/checkpoint.h"
#include "engine/autograd/node.h"
#include "engine/autograd/ops_elementwise.h"
#include "runtime/memory.h"

namespace wick {
namespace {

Tensor leaf(const std::vector<double>& values, const Shape& shape) {
  Tensor t = Tensor::from_vector<double>(values, shape).to(DType::F32);
  autograd::set_requires_grad(t, true);
  return t;
}

// A small "block": h -> exp(h * w1) * w2 + h
std::vector<Tensor> block(const std::vector<Tensor>& in, const Tensor& w1, const Tensor& w2) {
  return {autograd::exp(in[0] * w1) * w2 + in[0]};
}

TEST(Checkpoint, GradientsEqualThePlainRunBitwise) {
  std::vector<double> x_values = {0.1, -0.2, 0.3, 0.05, -0.4, 0.25};
  Tensor x_plain = leaf(x_values, {2, 3}), x_ckpt = leaf(x_values, {2, 3});
  std::vector<Tensor> w_plain, w_ckpt;
  for (int i = 0; i < 4; ++i) {
    std::vector<double> w = {0.5 + 0.1 * i, -0.3, 0.2 * i};
    w_plain.push_back(leaf(w, {3}));
    w_ckpt.push_back(leaf(w, {3}));
  }
  Tensor h_plain = x_plain, h_ckpt = x_ckpt;
  for (int b = 0; b < 2; ++b) {
    const Tensor &w1p = w_plain[2 * b], &w2p = w_plain[2 * b + 1];
    const Tensor &w1c = w_ckpt[2 * b], &w2c = w_ckpt[2 * b + 1];
    h_plain = block({h_plain}, w1p, w2p)[0];
    h_ckpt = autograd::checkpoint([&](const std::vector<Tensor>& in) { return block(in, w1c, w2c); }, {h_ckpt},
                                  {w1c, w2c})[0];
  }
  EXPECT_EQ(h_plain.to_vector<float>(), h_ckpt.to_vector<float>());
  autograd::GradientStore plain = autograd::backward(h_plain * h_plain);
  autograd::GradientStore ckpt = autograd::backward(h_ckpt * h_ckpt);
  EXPECT_EQ(plain.get(x_plain).to_vector<float>(), ckpt.get(x_ckpt).to_vector<float>());
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(plain.get(w_plain[i]).to_vector<float>(), ckpt.get(w_ckpt[i]).to_vector<float>()) << "w" << i;
}

TEST(Checkpoint, KeepsOnlyInputsDuringForward) {
  // 8 chained blocks over a 256 KiB activation: the plain graph keeps every intermediate, the
  // checkpointed one keeps one input per block.
  const int64_t n = 1 << 16;
  auto run = [&](bool use_checkpoint) {
    Tensor x = Tensor::from_vector<float>(std::vector<float>(n, 0.01f), {n});
    autograd::set_requires_grad(x, true);
    Tensor w1 = leaf({0.5}, {1}), w2 = leaf({0.5}, {1});
    reset_peak_memory(Device::cpu());
    int64_t before = memory_stats(Device::cpu()).current_bytes;
    Tensor h = x;
    for (int b = 0; b < 8; ++b) {
      if (use_checkpoint)
        h = autograd::checkpoint([&](const std::vector<Tensor>& in) { return block(in, w1, w2); }, {h}, {w1, w2})[0];
      else
        h = block({h}, w1, w2)[0];
    }
    int64_t held = memory_stats(Device::cpu()).current_bytes - before;
    autograd::GradientStore grads = autograd::backward(h, Tensor());
    EXPECT_TRUE(grads.get(x).defined());
    return held;
  };
  int64_t plain = run(false), checkpointed = run(true);
  EXPECT_LE(checkpointed * 2, plain) << "checkpointed forward held " << checkpointed << " bytes, plain " << plain;
}

}  // namespace
}  // namespace wick

#include "engine/autograd/ops_dropout.h"
#include "engine/autograd/rng_state.h"

namespace wick {
namespace {

TEST(Checkpoint, ReplaysDropoutRandomNumbers) {
  auto run = [](bool use_checkpoint) {
    autograd::current_rng() = {derive_stream(5, 0, 0, RngPurpose::Dropout), 0};
    Tensor x = leaf({0.3, -0.1, 0.7, 0.2, -0.5, 0.9, 0.4, -0.8}, {8});
    Tensor w = leaf({1.5}, {1});
    auto fn = [&](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{autograd::dropout(autograd::exp(in[0] * w), 0.5, true)};
    };
    Tensor h = use_checkpoint ? autograd::checkpoint(fn, {x}, {w})[0] : fn({x})[0];
    Tensor y = autograd::dropout(h, 0.5, true) * h;  // draws after the checkpointed call
    autograd::GradientStore grads = autograd::backward(y, Tensor());
    return std::make_pair(grads.get(x).to_vector<float>(), grads.get(w).to_vector<float>());
  };
  auto plain = run(false), checkpointed = run(true);
  EXPECT_EQ(plain.first, checkpointed.first);
  EXPECT_EQ(plain.second, checkpointed.second);
}

}  // namespace
}  // namespace wick
