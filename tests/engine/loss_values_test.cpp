// Loss values and gradients against float64 references computed by hand in this file (plus two
// constants known from torch), every reduction, label smoothing, probability and spatial targets,
// pos_weight, extreme logits (no overflow), and argument errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/autograd/backward.h"
#include "engine/autograd/node.h"
#include "engine/autograd/ops_loss.h"

namespace wick {
namespace {

using ::testing::HasSubstr;
using autograd::Reduction;

Tensor leaf(const std::vector<double>& values, const Shape& shape) {
  Tensor t = Tensor::from_vector<double>(values, shape);
  autograd::set_requires_grad(t, true);
  return t;
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, double tol = 1e-12) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i]))) << "[" << i << "]";
}

double scalar_of(const Tensor& t) { return t.to_vector<double>().at(0); }

// Reference log-softmax of one row.
std::vector<double> ref_log_softmax(const std::vector<double>& row) {
  double m = row[0];
  for (double v : row) m = std::max(m, v);
  double s = 0;
  for (double v : row) s += std::exp(v - m);
  std::vector<double> out;
  for (double v : row) out.push_back(v - m - std::log(s));
  return out;
}

TEST(LossValues, MseAllReductionsAndGradients) {
  std::vector<double> p = {1.0, -2.0, 0.5, 3.0}, t = {0.0, -1.0, 0.5, 1.0};
  Tensor pred = leaf(p, {2, 2}), target = leaf(t, {2, 2});
  std::vector<double> sq;
  double total = 0;
  for (size_t i = 0; i < p.size(); ++i) sq.push_back((p[i] - t[i]) * (p[i] - t[i])), total += sq.back();
  expect_near_all(autograd::mse_loss(pred, target, Reduction::None).to_vector<double>(), sq);
  EXPECT_NEAR(scalar_of(autograd::mse_loss(pred, target, Reduction::Sum)), total, 1e-12);
  Tensor loss = autograd::mse_loss(pred, target);
  EXPECT_EQ(loss.dim(), 0);
  EXPECT_NEAR(scalar_of(loss), total / 4, 1e-12);
  autograd::GradientStore store = autograd::backward(loss);
  std::vector<double> want_p, want_t;
  for (size_t i = 0; i < p.size(); ++i) want_p.push_back(2 * (p[i] - t[i]) / 4), want_t.push_back(-want_p.back());
  expect_near_all(store.get(pred).to_vector<double>(), want_p);
  expect_near_all(store.get(target).to_vector<double>(), want_t);
}

TEST(LossValues, CrossEntropyKnownValue) {
  // torch.nn.functional.cross_entropy(tensor([[1., 2., 3.]]), tensor([2])) = logsumexp(1,2,3) - 3.
  Tensor logits = Tensor::from_vector<double>({1, 2, 3}, {1, 3});
  Tensor labels = Tensor::from_vector<int64_t>({2}, {1});
  EXPECT_NEAR(scalar_of(autograd::cross_entropy_with_logits(logits, labels)), 0.40760596444438, 1e-12);
}

TEST(LossValues, CrossEntropyIndicesSmoothingAndGradient) {
  const int64_t n = 3, c = 4;
  std::vector<double> z = {0.1, 2.0, -1.0, 0.5, 3.0, 3.0, -2.0, 0.0, -0.3, 0.7, 1.1, -4.0};
  std::vector<int64_t> y = {1, 0, 3};
  for (double eps : {0.0, 0.1}) {
    Tensor logits = leaf(z, {n, c});
    Tensor labels = Tensor::from_vector<int64_t>(y, {n});
    std::vector<double> per, grad;
    for (int64_t i = 0; i < n; ++i) {
      std::vector<double> row(z.begin() + i * c, z.begin() + (i + 1) * c);
      std::vector<double> lsm = ref_log_softmax(row);
      double loss = 0;
      for (int64_t k = 0; k < c; ++k) {
        double q = (k == y[i] ? 1.0 - eps : 0.0) + eps / c;
        loss -= q * lsm[k];
        grad.push_back((std::exp(lsm[k]) - q) / n);
      }
      per.push_back(loss);
    }
    expect_near_all(autograd::cross_entropy_with_logits(logits, labels, Reduction::None, eps).to_vector<double>(),
                    per);
    EXPECT_NEAR(scalar_of(autograd::cross_entropy_with_logits(logits, labels, Reduction::Sum, eps)),
                per[0] + per[1] + per[2], 1e-12);
    Tensor loss = autograd::cross_entropy_with_logits(logits, labels, Reduction::Mean, eps);
    EXPECT_NEAR(scalar_of(loss), (per[0] + per[1] + per[2]) / n, 1e-12);
    autograd::GradientStore store = autograd::backward(loss);
    expect_near_all(store.get(logits).to_vector<double>(), grad);
    // I32 labels give the same result.
    EXPECT_NEAR(scalar_of(autograd::cross_entropy_with_logits(logits, labels.to(DType::I32), Reduction::Mean, eps)),
                scalar_of(loss), 1e-14);
  }
}

TEST(LossValues, CrossEntropySpatialMatchesPerPixelRows) {
  // logits [N=2, C=3, L=2], labels [2, 2]: each (n, l) is one sample over the class axis 1.
  std::vector<double> z = {0.2, -1.0, 1.5, 0.3, -0.4, 2.2, 1.0, 0.0, -1.0, 2.0, 0.5, 0.5};
  std::vector<int64_t> y = {2, 0, 1, 1};
  Tensor logits = Tensor::from_vector<double>(z, {2, 3, 2});
  Tensor labels = Tensor::from_vector<int64_t>(y, {2, 2});
  std::vector<double> per;
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t l = 0; l < 2; ++l) {
      std::vector<double> row;
      for (int64_t k = 0; k < 3; ++k) row.push_back(z[static_cast<size_t>(i * 6 + k * 2 + l)]);
      per.push_back(-ref_log_softmax(row)[static_cast<size_t>(y[static_cast<size_t>(i * 2 + l)])]);
    }
  Tensor none = autograd::cross_entropy_with_logits(logits, labels, Reduction::None);
  EXPECT_EQ(none.shape(), (Shape{2, 2}));
  expect_near_all(none.to_vector<double>(), per);
  EXPECT_NEAR(scalar_of(autograd::cross_entropy_with_logits(logits, labels)), (per[0] + per[1] + per[2] + per[3]) / 4,
              1e-12);
}

TEST(LossValues, CrossEntropyProbabilityTargets) {
  std::vector<double> z = {0.5, -0.5, 1.0, 2.0, 0.0, -1.0}, p = {0.2, 0.3, 0.5, 1.0, 0.0, 0.0};
  Tensor logits = leaf(z, {2, 3}), probs = leaf(p, {2, 3});
  const double eps = 0.2;
  double total = 0;
  std::vector<double> grad_z, grad_p;
  for (int64_t i = 0; i < 2; ++i) {
    std::vector<double> lsm = ref_log_softmax({z[i * 3], z[i * 3 + 1], z[i * 3 + 2]});
    double q_sum = 0;
    for (int64_t k = 0; k < 3; ++k) q_sum += (1 - eps) * p[i * 3 + k] + eps / 3;
    for (int64_t k = 0; k < 3; ++k) {
      double q = (1 - eps) * p[i * 3 + k] + eps / 3;
      total -= q * lsm[k];
      grad_z.push_back((std::exp(lsm[k]) * q_sum - q) / 2);
      grad_p.push_back(-(1 - eps) * lsm[k] / 2);
    }
  }
  Tensor loss = autograd::cross_entropy_with_logits(logits, probs, Reduction::Mean, eps);
  EXPECT_NEAR(scalar_of(loss), total / 2, 1e-12);
  autograd::GradientStore store = autograd::backward(loss);
  expect_near_all(store.get(logits).to_vector<double>(), grad_z);
  expect_near_all(store.get(probs).to_vector<double>(), grad_p);
}

TEST(LossValues, BceWithLogitsStableForm) {
  std::vector<double> x = {0.0, 2.0, -3.0, 100.0, -100.0, 0.7}, t = {1.0, 0.0, 0.25, 0.0, 0.0, 1.0};
  Tensor logits = leaf(x, {6}), target = leaf(t, {6});
  std::vector<double> per, grad_x, grad_t;
  for (size_t i = 0; i < x.size(); ++i) {
    per.push_back(std::max(x[i], 0.0) - x[i] * t[i] + std::log1p(std::exp(-std::fabs(x[i]))));
    grad_x.push_back((1 / (1 + std::exp(-x[i])) - t[i]) / 6);
    grad_t.push_back(-x[i] / 6);
  }
  EXPECT_NEAR(per[0], std::log(2.0), 1e-15);  // torch: bce_with_logits(0, 1) = log 2
  EXPECT_NEAR(per[3], 100.0, 1e-12);           // no overflow at |x| = 100
  expect_near_all(autograd::bce_with_logits(logits, target, Reduction::None).to_vector<double>(), per, 1e-12);
  double total = 0;
  for (double v : per) total += v;
  EXPECT_NEAR(scalar_of(autograd::bce_with_logits(logits, target, Reduction::Sum)), total, 1e-12);
  Tensor loss = autograd::bce_with_logits(logits, target);
  EXPECT_NEAR(scalar_of(loss), total / 6, 1e-12);
  autograd::GradientStore store = autograd::backward(loss);
  expect_near_all(store.get(logits).to_vector<double>(), grad_x);
  expect_near_all(store.get(target).to_vector<double>(), grad_t);
}

TEST(LossValues, BceWithLogitsPosWeight) {
  // torch: loss = (1 - t) x + (1 + (p - 1) t) (log(1 + exp(-|x|)) + max(-x, 0)), p per class.
  std::vector<double> x = {0.5, -1.5, 2.0, -0.2}, t = {1.0, 0.0, 0.6, 1.0}, pw = {3.0, 0.5};
  Tensor logits = leaf(x, {2, 2}), target = Tensor::from_vector<double>(t, {2, 2});
  Tensor pos_weight = Tensor::from_vector<double>(pw, {2});
  std::vector<double> per, grad_x;
  for (size_t i = 0; i < x.size(); ++i) {
    double p = pw[i % 2], w = 1 + (p - 1) * t[i];
    double softplus_neg = std::log1p(std::exp(-std::fabs(x[i]))) + std::max(-x[i], 0.0);
    per.push_back((1 - t[i]) * x[i] + w * softplus_neg);
    grad_x.push_back((1 - t[i]) - w / (1 + std::exp(x[i])));
  }
  expect_near_all(autograd::bce_with_logits(logits, target, Reduction::None, pos_weight).to_vector<double>(), per);
  Tensor loss = autograd::bce_with_logits(logits, target, Reduction::Sum, pos_weight);
  autograd::GradientStore store = autograd::backward(loss);
  expect_near_all(store.get(logits).to_vector<double>(), grad_x);
  // pos_weight of ones is the plain loss.
  expect_near_all(
      autograd::bce_with_logits(logits, target, Reduction::None, Tensor::from_vector<double>({1, 1}, {2}))
          .to_vector<double>(),
      autograd::bce_with_logits(logits, target, Reduction::None).to_vector<double>());
}

TEST(LossValues, F32MatchesF64) {
  std::vector<double> z = {0.1, 2.0, -1.0, 0.5, 3.0, 3.0};
  Tensor l64 = autograd::cross_entropy_with_logits(Tensor::from_vector<double>(z, {2, 3}),
                                                   Tensor::from_vector<int64_t>({2, 0}, {2}));
  Tensor l32 = autograd::cross_entropy_with_logits(Tensor::from_vector<double>(z, {2, 3}).to(DType::F32),
                                                   Tensor::from_vector<int64_t>({2, 0}, {2}));
  EXPECT_EQ(l32.dtype(), DType::F32);
  EXPECT_NEAR(scalar_of(l32), scalar_of(l64), 1e-6);
}

template <typename Fn>
void expect_error(Fn fn, const char* op, const char* detail) {
  try {
    fn();
    ADD_FAILURE() << "no error for " << op << " (" << detail << ")";
  } catch (const WickError& e) {
    EXPECT_THAT(e.what(), HasSubstr(op));
    EXPECT_THAT(e.what(), HasSubstr(detail));
  }
}

TEST(LossValues, ArgumentErrors) {
  Tensor a = Tensor::from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = Tensor::from_vector<double>({1, 2, 3}, {3});
  expect_error([&] { autograd::mse_loss(a, b); }, "mse_loss", "same shape");
  expect_error([&] { autograd::cross_entropy_with_logits(a, Tensor::from_vector<int64_t>({0, 3}, {2})); },
               "cross_entropy_with_logits", "out of range");
  expect_error([&] { autograd::cross_entropy_with_logits(a, Tensor::from_vector<int64_t>({0, -1}, {2})); },
               "cross_entropy_with_logits", "out of range");
  expect_error([&] { autograd::cross_entropy_with_logits(a, Tensor::from_vector<int64_t>({0, 1, 2}, {3})); },
               "cross_entropy_with_logits", "must have shape");
  expect_error([&] { autograd::cross_entropy_with_logits(b, Tensor::from_vector<int64_t>({0}, {1})); },
               "cross_entropy_with_logits", "[N, C, ...]");
  expect_error([&] { autograd::cross_entropy_with_logits(a, Tensor::from_vector<int64_t>({0, 1}, {2}),
                                                         Reduction::Mean, 1.5); },
               "cross_entropy_with_logits", "label_smoothing");
  expect_error([&] { autograd::bce_with_logits(a, b); }, "bce_with_logits", "same shape");
  expect_error([&] { autograd::bce_with_logits(a, a, Reduction::Mean, Tensor::from_vector<double>({1, 2}, {2})); },
               "bce_with_logits", "pos_weight");
}

}  // namespace
}  // namespace wick
