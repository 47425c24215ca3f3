// Value tests of the elementwise and reduction gradient rules at the points the finite-difference
// table avoids: ties of maximum/minimum and max/min reductions, abs and relu at 0; comparisons
// and where's condition carry no gradient; the fused activation backward op.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/autograd/backward.h"
#include "engine/autograd/node.h"
#include "engine/autograd/ops_elementwise.h"
#include "engine/autograd/ops_reduce.h"
#include "runtime/ops/elementwise.h"

namespace wick {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

Tensor leaf(const std::vector<double>& values, const Shape& shape) {
  Tensor t = Tensor::from_vector<double>(values, shape);
  autograd::set_requires_grad(t, true);
  return t;
}

std::vector<double> grad_of(const autograd::GradientStore& store, const Tensor& x) {
  Tensor g = store.get(x);
  EXPECT_TRUE(g.defined());
  return g.defined() ? g.to_vector<double>() : std::vector<double>{};
}

TEST(ElementwiseAutograd, ComparisonsDoNotRequireGrad) {
  Tensor x = leaf({1, -2, 3}, {3}), y = leaf({1, 2, 0}, {3});
  for (const Tensor& mask : {autograd::gt(x, 0.0), autograd::eq(x, y), autograd::le(x, y), autograd::ne(x, 1.0)}) {
    EXPECT_FALSE(autograd::requires_grad(mask));
    EXPECT_EQ(mask.dtype(), DType::U8);
  }
  EXPECT_THAT(autograd::lt(x, y).to_vector<double>(), ElementsAre(0, 1, 0));
  EXPECT_THAT(autograd::ge(x, 1.0).to_vector<double>(), ElementsAre(1, 0, 1));
}

TEST(ElementwiseAutograd, WhereConditionGetsNoGradient) {
  // A floating condition that itself requires grad: only a and b receive gradients.
  Tensor cond = leaf({1, 0, 2, 0}, {4});
  Tensor a = leaf({1, 2, 3, 4}, {4}), b = leaf({5, 6, 7, 8}, {4});
  Tensor out = autograd::where(cond, a, b);
  EXPECT_THAT(out.to_vector<double>(), ElementsAre(1, 6, 3, 8));
  autograd::GradientStore store = autograd::backward(autograd::sum(autograd::mul(out, 2.0)));
  EXPECT_FALSE(store.contains(cond));
  EXPECT_THAT(grad_of(store, a), ElementsAre(2, 0, 2, 0));
  EXPECT_THAT(grad_of(store, b), ElementsAre(0, 2, 0, 2));
}

TEST(ElementwiseAutograd, MaximumMinimumSplitTiesHalfHalf) {
  // torch: where(a == b, g / 2, g) masked to 0 where the operand lost.
  Tensor a = leaf({1, 2, 3}, {3}), b = leaf({1, 3, 2}, {3});
  autograd::GradientStore store = autograd::backward(autograd::sum(autograd::maximum(a, b)));
  EXPECT_THAT(grad_of(store, a), ElementsAre(0.5, 0, 1));
  EXPECT_THAT(grad_of(store, b), ElementsAre(0.5, 1, 0));
  store = autograd::backward(autograd::sum(autograd::minimum(a, b)));
  EXPECT_THAT(grad_of(store, a), ElementsAre(0.5, 1, 0));
  EXPECT_THAT(grad_of(store, b), ElementsAre(0.5, 0, 1));
  // With a scalar: the same rule (half at the tie).
  Tensor x = leaf({-1, 0, 1}, {3});
  store = autograd::backward(autograd::sum(autograd::maximum(x, 0.0)));
  EXPECT_THAT(grad_of(store, x), ElementsAre(0, 0.5, 1));
  store = autograd::backward(autograd::sum(autograd::minimum(x, 0.0)));
  EXPECT_THAT(grad_of(store, x), ElementsAre(1, 0.5, 0));
}

TEST(ElementwiseAutograd, MaxMinReductionsShareTiesEvenly) {
  Tensor x = leaf({1, 3, 3, 2, 0, 2}, {2, 3});
  autograd::GradientStore store = autograd::backward(autograd::sum(autograd::max(x, {1})));
  EXPECT_THAT(grad_of(store, x), ElementsAre(0, 0.5, 0.5, 0.5, 0, 0.5));
  store = autograd::backward(autograd::max(x));
  EXPECT_THAT(grad_of(store, x), ElementsAre(0, 0.5, 0.5, 0, 0, 0));
  Tensor y = leaf({0, 5, 0, 0}, {4});
  store = autograd::backward(autograd::min(y, {}, true));
  EXPECT_THAT(grad_of(store, y), ElementsAre(1.0 / 3, 0, 1.0 / 3, 1.0 / 3));
}

TEST(ElementwiseAutograd, AbsAndReluHaveZeroGradientAtZero) {
  Tensor x = leaf({-2, 0, 3}, {3});
  autograd::GradientStore store = autograd::backward(autograd::sum(autograd::abs(x)));
  EXPECT_THAT(grad_of(store, x), ElementsAre(-1, 0, 1));
  store = autograd::backward(autograd::sum(autograd::relu(x)));
  EXPECT_THAT(grad_of(store, x), ElementsAre(0, 0, 1));
}

TEST(ElementwiseAutograd, UnaryMinusRecordsNeg) {
  Tensor x = leaf({1, -2}, {2});
  Tensor y = -x;
  ASSERT_TRUE(autograd::grad_fn(y));
  EXPECT_STREQ(autograd::grad_fn(y)->name(), "neg");
  EXPECT_STREQ(autograd::grad_fn(2.0 - x)->name(), "neg");
  EXPECT_STREQ(autograd::grad_fn(x / 2.0)->name(), "div_scalar");
}

TEST(ElementwiseAutograd, PowMasksMatchTorch) {
  // d/da is 0 where b == 0 (even at a == 0); d/db is 0 where a == 0 and b >= 0.
  Tensor a = leaf({0, 0, 2}, {3}), b = leaf({0, 2, 3}, {3});
  autograd::GradientStore store = autograd::backward(autograd::sum(autograd::pow(a, b)));
  EXPECT_THAT(grad_of(store, a), ElementsAre(0, 0, 12));
  std::vector<double> grad_b = grad_of(store, b);
  EXPECT_EQ(grad_b[0], 0);
  EXPECT_EQ(grad_b[1], 0);
  EXPECT_NEAR(grad_b[2], 8 * std::log(2.0), 1e-12);
}

// The fused activation backward against closed forms in double, in f32, f64 and bf16.
TEST(ElementwiseAutograd, ActivationBackwardKernel) {
  std::vector<double> xs = {-3.0, -0.7, 0.0, 0.4, 2.5};
  std::vector<double> gs = {1.0, -2.0, 0.5, 3.0, -1.0};
  auto phi = [](double v) { return std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI); };
  auto cdf = [](double v) { return 0.5 * (1 + std::erf(v / std::sqrt(2.0))); };
  auto sigmoid = [](double v) { return 1 / (1 + std::exp(-v)); };
  auto gelu_tanh = [](double v) {
    const double k = std::sqrt(2 / M_PI);
    return 0.5 * v * (1 + std::tanh(k * (v + 0.044715 * v * v * v)));
  };
  for (DType dtype : {DType::F64, DType::F32, DType::BF16}) {
    double tol = dtype == DType::BF16 ? 3e-2 : dtype == DType::F32 ? 1e-5 : 1e-12;
    Tensor x = Tensor::from_vector<double>(xs, {5}).to(dtype), g = Tensor::from_vector<double>(gs, {5}).to(dtype);
    std::vector<double> x_r = x.to_vector<double>(), g_r = g.to_vector<double>();
    std::vector<double> gelu = gelu_backward(g, x).to_vector<double>();
    std::vector<double> silu = silu_backward(g, x).to_vector<double>();
    std::vector<double> tanh_form = gelu_tanh_backward(g, x).to_vector<double>();
    for (size_t i = 0; i < xs.size(); ++i) {
      double v = x_r[i], s = sigmoid(v), h = 1e-5;
      double numeric_tanh = (gelu_tanh(v + h) - gelu_tanh(v - h)) / (2 * h);
      EXPECT_NEAR(gelu[i], g_r[i] * (cdf(v) + v * phi(v)), tol * (1 + std::fabs(gelu[i]))) << dtype_name(dtype);
      EXPECT_NEAR(silu[i], g_r[i] * s * (1 + v * (1 - s)), tol * (1 + std::fabs(silu[i]))) << dtype_name(dtype);
      EXPECT_NEAR(tanh_form[i], g_r[i] * numeric_tanh, std::max(tol, 1e-8) * (1 + std::fabs(tanh_form[i])))
          << dtype_name(dtype);
    }
  }
}

TEST(ElementwiseAutograd, ActivationBackwardRejectsBadInput) {
  Tensor x = Tensor::from_vector<float>({1, 2}, {2});
  try {
    gelu_backward(Tensor::from_vector<float>({1, 2, 3}, {3}), x);
    FAIL() << "no error";
  } catch (const WickError& e) {
    EXPECT_THAT(e.what(), HasSubstr("gelu_backward"));
  }
  EXPECT_THROW(unary_backward(UnaryOp::Exp, x, x), WickError);
  EXPECT_THROW(silu_backward(x.to(DType::F64), x), WickError);
}

}  // namespace
}  // namespace wick
