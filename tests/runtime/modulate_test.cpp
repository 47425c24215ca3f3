// runtime/ops/modulate.h: the fused CPU kernels against the unfused expressions they replace
// (forward bitwise, since the same two roundings happen in the same order; gradients to 1e-6), the
// skipped gradients, and the shape checks.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/error.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/modulate.h"
#include "runtime/ops/random.h"
#include "runtime/ops/reduce.h"

namespace wick {
namespace {

Tensor random_input(const Shape& shape, uint64_t seed, DType dtype = DType::F32) {
  return randn(shape, derive_stream(seed, 0, 0, RngPurpose::Test), dtype);
}

void expect_close(const Tensor& a, const Tensor& b, double rel) {
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], rel * (1.0 + std::fabs(y[i]))) << i;
}

TEST(Modulate, FusedEqualsTheUnfusedExpressions) {
  for (DType dtype : {DType::F32, DType::F64}) {
    Tensor x = random_input({3, 37, 20}, 1, dtype), f = random_input({3, 37, 20}, 2, dtype);
    Tensor shift = random_input({3, 20}, 3, dtype), scale = random_input({3, 20}, 4, dtype);
    Tensor gate = random_input({3, 20}, 5, dtype), grad = random_input({3, 37, 20}, 6, dtype);
    Tensor one_plus = add(scale.unsqueeze(1), 1.0);
    EXPECT_EQ(modulate(x, shift, scale).to_vector<double>(),
              add(mul(x, one_plus), shift.unsqueeze(1)).to_vector<double>());
    EXPECT_EQ(gated_residual(x, gate, f).to_vector<double>(), add(x, mul(gate.unsqueeze(1), f)).to_vector<double>());

    ModulateGrads m = modulate_backward(grad, x, scale, true, true, true);
    EXPECT_EQ(m.x.to_vector<double>(), mul(grad, one_plus).to_vector<double>());
    expect_close(m.shift, sum(grad, {1}), 1e-6);
    expect_close(m.scale, sum(mul(grad, x), {1}), 1e-6);
    GatedResidualGrads g = gated_residual_backward(grad, gate, f, true, true);
    EXPECT_EQ(g.f.to_vector<double>(), mul(grad, gate.unsqueeze(1)).to_vector<double>());
    expect_close(g.gate, sum(mul(grad, f), {1}), 1e-6);
  }
}

TEST(Modulate, SixteenBitAndStridedOperandsTakeTheUnfusedPath) {
  Tensor x = random_input({2, 5, 4}, 7, DType::BF16);
  Tensor shift = random_input({2, 4}, 8, DType::BF16), scale = random_input({2, 4}, 9, DType::BF16);
  EXPECT_EQ(modulate(x, shift, scale).to_vector<double>(),
            add(mul(x, add(scale.unsqueeze(1), 1.0)), shift.unsqueeze(1)).to_vector<double>());
  Tensor wide = random_input({2, 4, 5}, 10);  // x as a transposed view
  Tensor xt = wide.transpose(1, 2);
  Tensor s32 = random_input({2, 4}, 11), c32 = random_input({2, 4}, 12);
  EXPECT_EQ(modulate(xt, s32, c32).to_vector<double>(),
            add(mul(xt, add(c32.unsqueeze(1), 1.0)), s32.unsqueeze(1)).to_vector<double>());
}

TEST(Modulate, OnlyTheAskedGradientsAreMade) {
  Tensor x = random_input({2, 3, 4}, 13), scale = random_input({2, 4}, 14), grad = random_input({2, 3, 4}, 15);
  ModulateGrads m = modulate_backward(grad, x, scale, true, false, false);
  EXPECT_TRUE(m.x.defined());
  EXPECT_FALSE(m.shift.defined());
  EXPECT_FALSE(m.scale.defined());
  GatedResidualGrads g = gated_residual_backward(grad, scale, x, true, false);
  EXPECT_TRUE(g.gate.defined());
  EXPECT_FALSE(g.f.defined());
}

TEST(Modulate, RejectsMismatchedShapes) {
  Tensor x = random_input({2, 3, 4}, 16);
  EXPECT_THROW(modulate(x, random_input({2, 5}, 17), random_input({2, 4}, 18)), WickError);
  EXPECT_THROW(modulate(random_input({6, 4}, 19), random_input({2, 4}, 17), random_input({2, 4}, 18)), WickError);
  EXPECT_THROW(gated_residual(x, random_input({2, 4}, 20), random_input({2, 3, 5}, 21)), WickError);
  EXPECT_THROW(modulate(x, random_input({2, 4}, 22, DType::F64), random_input({2, 4}, 23)), WickError);
}

}  // namespace
}  // namespace wick
