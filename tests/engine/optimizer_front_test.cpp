// The user-facing optimizers (engine/optim/optimizer.h): the flat layout against the flat kernels
// called directly, 16-bit parameters with f32 masters updated in place, rejected inputs, global
// norm clipping, the 8-bit/32-bit split per parameter, missing gradients, and the state round
// trip through safetensors with bitwise-equal continued steps.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/error_of.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/autograd/backward.h"
#include "engine/autograd/node.h"
#include "engine/optim/flat_optimizers.h"
#include "engine/optim/optimizer.h"
#include "runtime/ops/copy.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/reduce.h"
#include "runtime/safetensors.h"

namespace wick {
namespace {

using autograd::GradientStore;
using ::testing::HasSubstr;

Tensor trainable(const std::vector<float>& values, const Shape& shape, DType dtype = DType::F32,
                 const std::string& name = "") {
  Tensor t = Tensor::from_vector<float>(values, shape).to(dtype);
  autograd::set_requires_grad(t, true, name);
  return t;
}

std::vector<float> random_values(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> out(static_cast<size_t>(n));
  for (float& v : out) v = normal(rng);
  return out;
}

Tensor flat_f32(const std::vector<float>& values) {
  return Tensor::from_vector<float>(values, {static_cast<int64_t>(values.size())});
}

using wick::testing::error_of;

// Bit patterns, so that equality is bitwise (NaN == NaN, -0 != +0).
std::vector<uint32_t> bits(const std::vector<float>& values) {
  std::vector<uint32_t> out(values.size());
  std::memcpy(out.data(), values.data(), values.size() * sizeof(float));
  return out;
}
std::vector<uint8_t> bytes_of(const Tensor& t) {
  Tensor c = t.contiguous();
  const auto* p = static_cast<const uint8_t*>(c.data());
  return std::vector<uint8_t>(p, p + c.nbytes());
}

// The problem y = x·W + b, loss = ½ Σ (y − t)²: dL/dy = y − t, dL/dW = xᵀ(y − t), dL/db = Σ_rows (y − t).
struct Regression {
  static constexpr int64_t rows = 5, in = 3, out = 2;
  std::vector<float> x = random_values(rows * in, 11), target = random_values(rows * out, 12);

  // Gradients at W [in, out], b [out] (row-major), computed in double, rounded to f32.
  void gradients(const std::vector<float>& w, const std::vector<float>& b, std::vector<float>& grad_w,
                 std::vector<float>& grad_b) const {
    std::vector<double> residual(rows * out);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < out; ++o) {
        double y = b[o];
        for (int64_t i = 0; i < in; ++i) y += static_cast<double>(x[r * in + i]) * w[i * out + o];
        residual[r * out + o] = y - target[r * out + o];
      }
    grad_w.assign(in * out, 0.0f);
    grad_b.assign(out, 0.0f);
    for (int64_t i = 0; i < in; ++i)
      for (int64_t o = 0; o < out; ++o) {
        double s = 0.0;
        for (int64_t r = 0; r < rows; ++r) s += static_cast<double>(x[r * in + i]) * residual[r * out + o];
        grad_w[i * out + o] = static_cast<float>(s);
      }
    for (int64_t o = 0; o < out; ++o) {
      double s = 0.0;
      for (int64_t r = 0; r < rows; ++r) s += residual[r * out + o];
      grad_b[o] = static_cast<float>(s);
    }
  }
};

TEST(OptimizerFront, AdamWMatchesFlatKernelOnRegression) {
  Regression problem;
  std::vector<float> w0 = random_values(Regression::in * Regression::out, 1), b0 = random_values(2, 2);
  Tensor w = trainable(w0, {Regression::in, Regression::out}), b = trainable(b0, {Regression::out});
  OptimizerConfig config{.weight_decay = 0.1f};
  auto optimizer = make_optimizer("adamw", {{"w", w}, {"b", b}}, config);
  EXPECT_STREQ(optimizer->name(), "adamw");
  EXPECT_EQ(optimizer->parameters()[0].offset, 0);
  EXPECT_EQ(optimizer->parameters()[1].offset, 256);  // each parameter on a block boundary
  EXPECT_EQ(optimizer->flat_numel(), 512);

  // Reference: adamw_step on each parameter's own flat buffers.
  Tensor ref_w = flat_f32(w0), ref_b = flat_f32(b0);
  AdamWState state_w = AdamWState::zeros(6, false, Device::cpu()), state_b = AdamWState::zeros(2, false, Device::cpu());
  float lr = 0.05f;
  for (int64_t t = 1; t <= 6; ++t) {
    std::vector<float> grad_w, grad_b;
    problem.gradients(w.to_vector<float>(), b.to_vector<float>(), grad_w, grad_b);
    GradientStore store;
    store.add(w, Tensor::from_vector<float>(grad_w, w.shape()), true);
    store.add(b, Tensor::from_vector<float>(grad_b, b.shape()), true);
    StepReport report = optimizer->step(store, lr);
    EXPECT_EQ(report.n_nonfinite, 0);
    EXPECT_EQ(report.n_missing, 0);
    EXPECT_FALSE(report.clipped);

    AdamWHyper hyper{.lr = lr, .weight_decay = 0.1f, .step = t};
    adamw_step(ref_w, flat_f32(grad_w), state_w, hyper);
    adamw_step(ref_b, flat_f32(grad_b), state_b, hyper);
    ASSERT_EQ(bits(w.to_vector<float>()), bits(ref_w.to_vector<float>())) << "step " << t;
    ASSERT_EQ(bits(b.to_vector<float>()), bits(ref_b.to_vector<float>())) << "step " << t;
  }
  EXPECT_EQ(optimizer->steps_taken(), 6);
  NamedTensors state = optimizer->state_tensors();
  ASSERT_EQ(state.size(), 5u);  // step, w.m, w.v, b.m, b.v
  EXPECT_EQ(state[1].first, "w.m");
  EXPECT_EQ(bytes_of(state[1].second), bytes_of(state_w.m));
  EXPECT_EQ(bytes_of(state[4].second), bytes_of(state_b.v));
  // The loss went down.
  auto loss = [&](const std::vector<float>& wv, const std::vector<float>& bv) {
    std::vector<float> gw, gb;
    problem.gradients(wv, bv, gw, gb);
    double s = 0;
    for (float g : gb) s += double(g) * g;
    return s;
  };
  EXPECT_LT(loss(w.to_vector<float>(), b.to_vector<float>()), loss(w0, b0));
}

TEST(OptimizerFront, SgdMomentumMatchesFlatKernel) {
  std::vector<float> p0 = random_values(300, 3);
  Tensor p = trainable(p0, {300});
  OptimizerConfig config{.weight_decay = 0.01f, .momentum = 0.9f, .nesterov = true};
  auto optimizer = make_optimizer("sgd", {{"p", p}}, config);
  Tensor ref = flat_f32(p0), buffer = flat_f32(std::vector<float>(300, 0.0f));
  for (int64_t t = 1; t <= 4; ++t) {
    std::vector<float> g = random_values(300, 100 + static_cast<uint32_t>(t));
    GradientStore store;
    store.add(p, flat_f32(g), true);
    optimizer->step(store, 0.1f);
    sgd_step(ref, flat_f32(g), buffer,
             SgdHyper{.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f, .nesterov = true, .step = t});
    ASSERT_EQ(bits(p.to_vector<float>()), bits(ref.to_vector<float>())) << "step " << t;
  }
  EXPECT_EQ(optimizer->state_bytes(), 300 * 4);
  EXPECT_EQ(optimizer->state_tensors()[1].first, "p.momentum");
}

TEST(OptimizerFront, Bf16ParameterGetsF32MasterAndIsUpdatedInPlace) {
  std::vector<float> p0 = random_values(64, 4);
  Tensor p = trainable(p0, {8, 8}, DType::BF16);
  const void* pointer = p.data();
  auto storage = p.storage().get();
  auto optimizer = make_optimizer("adamw", {{"p", p}}, {});
  const ParameterSlot& slot = optimizer->parameters()[0];
  EXPECT_EQ(slot.master.dtype(), DType::F32);
  EXPECT_EQ(bits(slot.master.to_vector<float>()), bits(p.to_vector<float>()));  // master = the bf16 values

  // A step of lr 1e-4 is far below bf16's resolution near 1: the master moves, the bf16 copy
  // is the master rounded to nearest even.
  GradientStore store;
  store.add(p, Tensor::from_vector<float>(random_values(64, 5), {8, 8}), true);
  EXPECT_EQ(store.get(p).dtype(), DType::F32);
  optimizer->step(store, 1e-4f);
  optimizer->step(store, 1e-4f);
  EXPECT_EQ(p.data(), pointer);
  EXPECT_EQ(p.storage().get(), storage);
  EXPECT_EQ(p.dtype(), DType::BF16);
  std::vector<float> master = slot.master.to_vector<float>();
  EXPECT_EQ(bits(p.to_vector<float>()), bits(Tensor::from_vector<float>(master, {8, 8}).to(DType::BF16).to_vector<float>()));
  int64_t n_finer = 0;
  std::vector<float> values = p.to_vector<float>();
  for (size_t i = 0; i < master.size(); ++i) n_finer += master[i] != values[i];
  EXPECT_GT(n_finer, 32);  // most masters hold bits the bf16 parameter cannot
  // The master is part of the saved state of a 16-bit parameter.
  NamedTensors state = optimizer->state_tensors();
  ASSERT_GE(state.size(), 2u);
  EXPECT_EQ(state[1].first, "p.master");
}

TEST(OptimizerFront, RejectsBadParameterLists) {
  Tensor frozen = Tensor::from_vector<float>({1, 2}, {2});
  Tensor ok = trainable({1, 2}, {2});
  EXPECT_THAT(error_of([&] { make_optimizer("adamw", {{"ok", ok}, {"base.weight", frozen}}); }),
              AllOf(HasSubstr("base.weight"), HasSubstr("frozen")));
  EXPECT_THAT(error_of([&] { make_optimizer("adamw", {}); }),
              HasSubstr("no parameter is trainable: did the network.target patterns match any module?"));
  EXPECT_THAT(error_of([&] { make_optimizer("adam", {{"ok", ok}}); }),
              AllOf(HasSubstr("\"adam\""), HasSubstr("adamw, adamw8bit, sgd")));
  EXPECT_THAT(error_of([&] { make_optimizer("sgd", {{"a", ok}, {"a", trainable({1}, {1})}}); }),
              HasSubstr("listed twice"));
  EXPECT_THAT(error_of([&] { make_optimizer("sgd", {{"a", ok}, {"b", ok}}); }), HasSubstr("same tensor"));
  EXPECT_THAT(error_of([&] { make_optimizer("sgd", {{"a", ok}}, {.max_grad_norm = -1.0f}); }),
              HasSubstr("max_grad_norm"));
  EXPECT_THAT(error_of([&] { make_optimizer("sgd", {{"a", ok}}, {.nesterov = true}); }), HasSubstr("nesterov"));
  auto optimizer = make_optimizer("sgd", {{"a", ok}});
  EXPECT_THAT(error_of([&] { optimizer->step(GradientStore(), std::nanf("")); }), HasSubstr("lr"));
  EXPECT_THAT(error_of([&] { optimizer->state_bytes("nope"); }), HasSubstr("nope"));
}

TEST(OptimizerFront, ClippingScalesByMaxNormOverNorm) {
  // SGD, lr 1, no decay: p_new = p − coefficient · g. ‖g‖ = ‖(3, 4, 12)‖ = 13.
  Tensor a = trainable({0, 0}, {2}), b = trainable({0}, {1});
  GradientStore store;
  store.add(a, Tensor::from_vector<float>({3, 4}, {2}), true);
  store.add(b, Tensor::from_vector<float>({12}, {1}), true);

  auto clipped = make_optimizer("sgd", {{"a", a}, {"b", b}}, {.weight_decay = 0.0f, .max_grad_norm = 1.0f});
  StepReport report = clipped->step(store, 1.0f);
  EXPECT_FLOAT_EQ(report.grad_norm, 13.0f);
  EXPECT_TRUE(report.clipped);
  float coefficient = 1.0f / (13.0f + 1e-6f);
  EXPECT_FLOAT_EQ(a.to_vector<float>()[0], -3.0f * coefficient);
  EXPECT_FLOAT_EQ(a.to_vector<float>()[1], -4.0f * coefficient);
  EXPECT_FLOAT_EQ(b.to_vector<float>()[0], -12.0f * coefficient);
  // The stored gradients are not modified by clipping.
  EXPECT_EQ(store.get(b).to_vector<float>()[0], 12.0f);

  Tensor c = trainable({0, 0}, {2}), d = trainable({0}, {1});
  GradientStore store2;
  store2.add(c, Tensor::from_vector<float>({3, 4}, {2}), true);
  store2.add(d, Tensor::from_vector<float>({12}, {1}), true);
  auto loose = make_optimizer("sgd", {{"c", c}, {"d", d}}, {.weight_decay = 0.0f, .max_grad_norm = 20.0f});
  report = loose->step(store2, 1.0f);
  EXPECT_FLOAT_EQ(report.grad_norm, 13.0f);
  EXPECT_FALSE(report.clipped);
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{-3.0f, -4.0f}));

  // A non-finite element: the reported norm is non-finite, the finite part (norm 13) is clipped
  // and updated, the bad element is skipped and counted.
  Tensor e = trainable({0, 0, 0}, {3}), f = trainable({0}, {1});
  GradientStore store3;
  store3.add(e, Tensor::from_vector<float>({3, std::numeric_limits<float>::quiet_NaN(), 4}, {3}), true);
  store3.add(f, Tensor::from_vector<float>({12}, {1}), true);
  auto guarded = make_optimizer("sgd", {{"e", e}, {"f", f}}, {.weight_decay = 0.0f, .max_grad_norm = 1.0f});
  report = guarded->step(store3, 1.0f);
  EXPECT_TRUE(std::isnan(report.grad_norm));
  EXPECT_TRUE(report.clipped);
  EXPECT_EQ(report.n_nonfinite, 1);
  EXPECT_FLOAT_EQ(e.to_vector<float>()[0], -3.0f * coefficient);
  EXPECT_EQ(e.to_vector<float>()[1], 0.0f);
  EXPECT_FLOAT_EQ(f.to_vector<float>()[0], -12.0f * coefficient);
}

TEST(OptimizerFront, ClippingNormOfALargeBufferMatchesADoubleSum) {
  // 300,000 elements: the squared norm is summed in stages of 256-element rows; with a NaN, the
  // finite elements' norm sets the coefficient.
  std::vector<float> g = random_values(300000, 61);
  double squared = 0.0;
  for (float v : g) squared += static_cast<double>(v) * v;
  for (bool with_nan : {false, true}) {
    Tensor p = trainable(std::vector<float>(g.size(), 0.0f), {static_cast<int64_t>(g.size())});
    std::vector<float> given = g;
    if (with_nan) given[1] = std::numeric_limits<float>::quiet_NaN();
    double finite_squared = with_nan ? squared - static_cast<double>(g[1]) * g[1] : squared;
    GradientStore store;
    store.add(p, Tensor::from_vector<float>(given, {static_cast<int64_t>(g.size())}), true);
    auto optimizer = make_optimizer("sgd", {{"p", p}}, {.weight_decay = 0.0f, .max_grad_norm = 1.0f});
    StepReport report = optimizer->step(store, 1.0f);
    if (with_nan) EXPECT_TRUE(std::isnan(report.grad_norm));
    else EXPECT_NEAR(report.grad_norm, std::sqrt(squared), 1e-6 * std::sqrt(squared));
    double coefficient = 1.0 / (std::sqrt(finite_squared) + 1e-6);
    EXPECT_NEAR(p.to_vector<float>()[0], -g[0] * coefficient, 1e-6 * std::abs(g[0] * coefficient)) << with_nan;
  }
}

TEST(OptimizerFront, SquaredNormReducerHookFeedsClipping) {
  // A reducer standing in for an all-reduce over 4 ranks holding the same gradients: norm doubles.
  Tensor a = trainable({0, 0}, {2});
  GradientStore store;
  store.add(a, Tensor::from_vector<float>({3, 4}, {2}), true);
  auto optimizer = make_optimizer("sgd", {{"a", a}}, {.weight_decay = 0.0f, .max_grad_norm = 5.0f});
  int64_t n_calls = 0;
  optimizer->set_squared_norm_reducer([&](const Tensor& local) {
    ++n_calls;
    EXPECT_EQ(local.numel(), 1);
    EXPECT_FLOAT_EQ(static_cast<float>(local.item()), 25.0f);
    return Tensor::scalar(local.item() * 4.0);
  });
  StepReport report = optimizer->step(store, 1.0f);
  EXPECT_EQ(n_calls, 1);
  EXPECT_FLOAT_EQ(report.grad_norm, 10.0f);
  EXPECT_TRUE(report.clipped);
  EXPECT_FLOAT_EQ(a.to_vector<float>()[0], -3.0f * (5.0f / (10.0f + 1e-6f)));
}

TEST(OptimizerFront, EightBitOrThirtyTwoBitStatePerWholeParameter) {
  std::vector<float> small0 = random_values(1000, 6), big0 = random_values(5000, 7);
  Tensor small = trainable(small0, {10, 100}), big = trainable(big0, {50, 100});
  auto optimizer = make_optimizer("adamw8bit", {{"small", small}, {"big", big}}, {});
  const auto& slots = optimizer->parameters();
  ASSERT_EQ(slots.size(), 2u);
  EXPECT_EQ(slots[0].name, "big");  // the 8-bit region comes first
  EXPECT_TRUE(slots[0].eight_bit);
  EXPECT_EQ(slots[0].offset, 0);
  EXPECT_EQ(slots[1].name, "small");
  EXPECT_FALSE(slots[1].eight_bit);
  EXPECT_EQ(slots[1].offset, 5120);  // 5000 rounded up to 20 blocks of 256
  EXPECT_EQ(optimizer->region_32bit_offset(), 5120);
  EXPECT_EQ(optimizer->flat_numel(), 5120 + 1024);
  EXPECT_EQ(optimizer->state_bytes("big"), 2 * 5000 + 8 * 20);  // 2.032 bytes per element
  EXPECT_EQ(optimizer->state_bytes("small"), 8 * 1000);
  EXPECT_EQ(optimizer->state_bytes(), 10160 + 8000);

  std::vector<std::string> names;
  for (const auto& [name, tensor] : optimizer->state_tensors()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"step", "big.m_codes", "big.v_codes", "big.absmax_m", "big.absmax_v",
                                             "small.m", "small.v"}));

  // Each region equals the flat kernel on the parameter alone (padding changes nothing).
  Tensor ref_small = flat_f32(small0), ref_big = flat_f32(big0);
  AdamWState s_small = AdamWState::zeros(1000, false, Device::cpu());
  AdamWState s_big = AdamWState::zeros(5000, true, Device::cpu());
  for (int64_t t = 1; t <= 3; ++t) {
    std::vector<float> g_small = random_values(1000, 200 + static_cast<uint32_t>(t));
    std::vector<float> g_big = random_values(5000, 300 + static_cast<uint32_t>(t));
    GradientStore store;
    store.add(small, Tensor::from_vector<float>(g_small, {10, 100}), true);
    store.add(big, Tensor::from_vector<float>(g_big, {50, 100}), true);
    optimizer->step(store, 1e-3f);
    AdamWHyper hyper{.lr = 1e-3f, .step = t};
    adamw_step(ref_small, flat_f32(g_small), s_small, hyper);
    adamw_step(ref_big, flat_f32(g_big), s_big, hyper);
    ASSERT_EQ(bits(small.to_vector<float>()), bits(ref_small.to_vector<float>())) << "step " << t;
    ASSERT_EQ(bits(big.to_vector<float>()), bits(ref_big.to_vector<float>())) << "step " << t;
  }
  NamedTensors state = optimizer->state_tensors();
  EXPECT_EQ(bytes_of(state[1].second), bytes_of(s_big.m_codes));
  EXPECT_EQ(bytes_of(state[4].second), bytes_of(s_big.absmax_v));
  EXPECT_EQ(bytes_of(state[5].second), bytes_of(s_small.m));

  // "adamw" keeps 32-bit state for every parameter.
  auto full = make_optimizer("adamw", {{"big", trainable(big0, {5000})}}, {});
  EXPECT_FALSE(full->parameters()[0].eight_bit);
  EXPECT_EQ(full->state_bytes(), 8 * 5000);
}

TEST(OptimizerFront, MissingGradientIsZeroAndCounted) {
  Tensor a = trainable({1, 2}, {2}), b = trainable({1, -2, 4}, {3});
  auto optimizer = make_optimizer("adamw", {{"a", a}, {"b", b}}, {.weight_decay = 0.5f});
  GradientStore store;
  store.add(a, Tensor::from_vector<float>({1, 1}, {2}), true);
  StepReport report = optimizer->step(store, 0.1f);
  EXPECT_EQ(report.n_missing, 1);
  // b: zero gradient, zero moments: only the decoupled decay p·(1 − lr·wd) acts.
  float decay = static_cast<float>(1.0 - 0.1 * 0.5);
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{1.0f * decay, -2.0f * decay, 4.0f * decay}));
  EXPECT_NE(a.to_vector<float>()[0], 1.0f * decay);
}

TEST(OptimizerFront, ReloadParametersRereadsMasters) {
  Tensor p = trainable({1, 2, 3}, {3});
  auto optimizer = make_optimizer("sgd", {{"p", p}}, {.weight_decay = 0.0f});
  p.copy_from(Tensor::from_vector<float>({7, 8, 9}, {3}));  // e.g. weights loaded from a file
  optimizer->reload_parameters();
  EXPECT_EQ(optimizer->parameters()[0].master.to_vector<float>(), (std::vector<float>{7, 8, 9}));
  GradientStore store;
  store.add(p, Tensor::from_vector<float>({1, 1, 1}, {3}), true);
  optimizer->step(store, 1.0f);
  EXPECT_EQ(p.to_vector<float>(), (std::vector<float>{6, 7, 8}));
}

std::string temp_path(const std::string& name) {
  std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "wick_optimizer_front_test";
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

// Parameters for the round trip: an 8-bit bf16 one (f32 master), an 8-bit f32 one with a partial
// last block, a 32-bit f32 one.
struct RoundTripModel {
  Tensor big16, big32, small;
  NamedParameters named() const { return {{"big16", big16}, {"big32", big32}, {"small", small}}; }
};

RoundTripModel make_model(const std::vector<float>& big16, const std::vector<float>& big32,
                          const std::vector<float>& small) {
  return {trainable(big16, {64, 80}, DType::BF16), trainable(big32, {4100}), trainable(small, {7, 33})};
}

void train(Optimizer& optimizer, const RoundTripModel& model, int64_t first_step, int64_t n_steps) {
  for (int64_t s = first_step; s < first_step + n_steps; ++s) {
    GradientStore store;
    // Gradient of ½‖p − 0.5‖² plus noise that depends on the step.
    for (const auto& [name, p] : model.named()) {
      std::vector<float> values = p.to_vector<float>();
      std::vector<float> noise = random_values(p.numel(), 1000 + static_cast<uint32_t>(s) * 7 + static_cast<uint32_t>(name.size()), 0.3f);
      for (size_t i = 0; i < values.size(); ++i) values[i] = values[i] - 0.5f + noise[i];
      store.add(p, Tensor::from_vector<float>(values, p.shape()), true);
    }
    optimizer.step(store, static_cast<float>(1e-2 / (1.0 + 0.1 * s)));
  }
}

TEST(OptimizerFront, StateRoundTripThroughSafetensorsContinuesBitwise) {
  std::vector<float> v16 = random_values(64 * 80, 21), v32 = random_values(4100, 22), vs = random_values(231, 23);
  OptimizerConfig config{.weight_decay = 0.05f, .max_grad_norm = 50.0f};

  // Uninterrupted: 8 steps.
  RoundTripModel straight = make_model(v16, v32, vs);
  auto optimizer_a = make_optimizer("adamw8bit", straight.named(), config);
  train(*optimizer_a, straight, 0, 4);
  // Checkpoint after 4 steps: the parameters and the optimizer state, as files.
  std::string params_path = temp_path("params.safetensors"), state_path = temp_path("optimizer.safetensors");
  save_safetensors(params_path, straight.named());
  save_safetensors(state_path, optimizer_a->state_tensors());
  train(*optimizer_a, straight, 4, 4);

  // Resumed: fresh tensors from the files, a fresh optimizer, the state loaded, 4 more steps.
  SafetensorsFile params_file = SafetensorsFile::open(params_path);
  RoundTripModel resumed{params_file.get("big16").clone(), params_file.get("big32").clone(),
                         params_file.get("small").clone()};
  for (const auto& [name, p] : resumed.named()) autograd::set_requires_grad(p, true, name);
  auto optimizer_b = make_optimizer("adamw8bit", resumed.named(), config);
  SafetensorsFile state_file = SafetensorsFile::open(state_path);
  NamedTensors loaded;
  for (const std::string& name : state_file.names()) loaded.emplace_back(name, state_file.get(name));
  optimizer_b->load_state(loaded);
  EXPECT_EQ(optimizer_b->steps_taken(), 4);
  // The loaded state equals what was saved, bitwise.
  for (const auto& [name, tensor] : optimizer_b->state_tensors())
    EXPECT_EQ(bytes_of(tensor), bytes_of(state_file.get(name))) << name;
  train(*optimizer_b, resumed, 4, 4);

  EXPECT_EQ(optimizer_b->steps_taken(), 8);
  EXPECT_EQ(bytes_of(resumed.big16), bytes_of(straight.big16));
  EXPECT_EQ(bytes_of(resumed.big32), bytes_of(straight.big32));
  EXPECT_EQ(bytes_of(resumed.small), bytes_of(straight.small));
  NamedTensors state_a = optimizer_a->state_tensors(), state_b = optimizer_b->state_tensors();
  ASSERT_EQ(state_a.size(), state_b.size());
  for (size_t i = 0; i < state_a.size(); ++i) {
    EXPECT_EQ(state_a[i].first, state_b[i].first);
    EXPECT_EQ(bytes_of(state_a[i].second), bytes_of(state_b[i].second)) << state_a[i].first;
  }
  // A resumed run without the state differs (the test can tell).
  RoundTripModel fresh{params_file.get("big16").clone(), params_file.get("big32").clone(),
                       params_file.get("small").clone()};
  for (const auto& [name, p] : fresh.named()) autograd::set_requires_grad(p, true, name);
  auto optimizer_c = make_optimizer("adamw8bit", fresh.named(), config);
  train(*optimizer_c, fresh, 4, 4);
  EXPECT_NE(bytes_of(fresh.big32), bytes_of(straight.big32));
}

TEST(OptimizerFront, LoadStateValidatesNamesShapesAndDtypes) {
  Tensor p = trainable(random_values(5000, 30), {5000});
  auto optimizer = make_optimizer("adamw8bit", {{"p", p}}, {});
  NamedTensors good = optimizer->state_tensors();
  auto with = [&](const std::string& name, const Tensor& replacement) {
    NamedTensors out;
    for (const auto& [n, t] : good) out.emplace_back(n, n == name ? replacement : t);
    return out;
  };
  EXPECT_THAT(error_of([&] { optimizer->load_state({good.begin(), good.end() - 1}); }),
              HasSubstr("missing tensor \"p.absmax_v\""));
  NamedTensors extra = good;
  extra.emplace_back("q.m", Tensor::from_vector<float>({1}, {1}));
  EXPECT_THAT(error_of([&] { optimizer->load_state(extra); }), HasSubstr("unexpected tensor \"q.m\""));
  EXPECT_THAT(error_of([&] { optimizer->load_state(with("p.m_codes", Tensor::empty({4999}, DType::U8))); }),
              AllOf(HasSubstr("p.m_codes"), HasSubstr("u8[4999]")));
  EXPECT_THAT(error_of([&] { optimizer->load_state(with("p.absmax_m", Tensor::empty({20}, DType::F64))); }),
              AllOf(HasSubstr("p.absmax_m"), HasSubstr("f64")));
  EXPECT_THAT(error_of([&] { optimizer->load_state(with("step", Tensor::scalar(-1.0, DType::I64))); }),
              HasSubstr("step"));
  // A 32-bit checkpoint does not load into an 8-bit optimizer.
  auto adamw = make_optimizer("adamw", {{"p", p}}, {});
  EXPECT_THAT(error_of([&] { optimizer->load_state(adamw->state_tensors()); }), HasSubstr("p.m_codes"));
}

}  // namespace
}  // namespace wick

namespace wick {
namespace {

TEST(OptimizerFront, CudaNormAndClippingPassesEqualTheTensorOps) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  // On CUDA the squared norm's first stage and the clipping scale are fused passes over the flat
  // gradient: the norm must equal staged sums of square() and the clipped gradient mul(), bitwise.
  // 2 parameters of 150,000 and 140,001 elements: 290,048 flat elements, more than 65,536.
  Device gpu = Device::cuda(0);
  std::vector<float> ga = random_values(150000, 81), gb = random_values(140001, 82);
  Tensor a = Tensor::from_vector<float>(std::vector<float>(ga.size(), 0.5f), {150000}).to(gpu);
  Tensor b = Tensor::from_vector<float>(std::vector<float>(gb.size(), 0.5f), {140001}).to(gpu);
  autograd::set_requires_grad(a, true, "a");
  autograd::set_requires_grad(b, true, "b");
  for (float max_norm : {0.0f, 1.0f}) {
    SCOPED_TRACE(max_norm);
    auto optimizer = make_optimizer("adamw", {{"a", a}, {"b", b}}, {.max_grad_norm = max_norm});
    ASSERT_EQ(optimizer->flat_numel(), 290048);
    GradientStore store;
    store.add(a, Tensor::from_vector<float>(ga, {150000}).to(gpu), true);
    store.add(b, Tensor::from_vector<float>(gb, {140001}).to(gpu), true);
    StepReport report = optimizer->step(store, 1e-3f);
    // The flat gradient as the step saw it: both gradients at their offsets, zero padding.
    Tensor flat = Tensor::empty({290048}, DType::F32, gpu);
    copy_into(flat, Tensor::scalar(0.0));
    copy_into(flat.narrow(0, 0, 150000), store.get(a));
    copy_into(flat.narrow(0, optimizer->parameters()[1].offset, 140001), store.get(b));
    Tensor squared = sum(sum(square(flat).view({-1, 256}), {1}));
    float want_norm = static_cast<float>(std::sqrt(squared.item()));
    EXPECT_EQ(bits({report.grad_norm}), bits({want_norm}));
    EXPECT_EQ(report.clipped, max_norm > 0.0f);
    Tensor want_grad = max_norm > 0.0f ? mul(flat, static_cast<double>(max_norm / (want_norm + 1e-6f))) : flat;
    EXPECT_EQ(bytes_of(optimizer->flat_gradient().to(Device::cpu())), bytes_of(want_grad.to(Device::cpu())));
  }
}

TEST(OptimizerFront, CudaMatchesCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  // The flat kernels round identically on both backends; without clipping (whose f32 sum order
  // differs) the parameters, masters and state must be bitwise equal.
  std::vector<float> v16 = random_values(64 * 80, 41), v32 = random_values(4100, 42), vs = random_values(231, 43);
  RoundTripModel cpu = make_model(v16, v32, vs);
  RoundTripModel gpu{cpu.big16.to(Device::cuda(0)), cpu.big32.to(Device::cuda(0)), cpu.small.to(Device::cuda(0))};
  for (const auto& [name, p] : gpu.named()) autograd::set_requires_grad(p, true, name);
  OptimizerConfig config{.weight_decay = 0.05f};
  auto optimizer_cpu = make_optimizer("adamw8bit", cpu.named(), config);
  auto optimizer_gpu = make_optimizer("adamw8bit", gpu.named(), config);
  for (int64_t s = 0; s < 3; ++s) {
    GradientStore store_cpu, store_gpu;
    for (size_t i = 0; i < 3; ++i) {
      const Tensor& p = cpu.named()[i].second;
      Tensor g = Tensor::from_vector<float>(random_values(p.numel(), 500 + static_cast<uint32_t>(s * 3 + i)), p.shape());
      store_cpu.add(p, g, true);
      store_gpu.add(gpu.named()[i].second, g.to(Device::cuda(0)), true);
    }
    StepReport report_cpu = optimizer_cpu->step(store_cpu, 1e-3f);
    StepReport report_gpu = optimizer_gpu->step(store_gpu, 1e-3f);
    EXPECT_NEAR(report_gpu.grad_norm, report_cpu.grad_norm, 1e-5f * report_cpu.grad_norm);
  }
  for (size_t i = 0; i < 3; ++i)
    EXPECT_EQ(bytes_of(gpu.named()[i].second.to(Device::cpu())), bytes_of(cpu.named()[i].second)) << i;
  NamedTensors state_cpu = optimizer_cpu->state_tensors(), state_gpu = optimizer_gpu->state_tensors();
  for (size_t i = 0; i < state_cpu.size(); ++i)
    EXPECT_EQ(bytes_of(state_gpu[i].second.to(Device::cpu())), bytes_of(state_cpu[i].second)) << state_cpu[i].first;
}

}  // namespace
}  // namespace wick
