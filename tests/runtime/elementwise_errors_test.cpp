// Errors (and edge-case rules) of the elementwise, reduction and creation ops: bad input throws
// WickError naming the op, the shapes and the dtypes; documented edge rules hold.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/error_of.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/reduce.h"
#include "runtime/ops/softmax.h"

namespace wick {
namespace {

using ::testing::HasSubstr;

using wick::testing::error_of;

Tensor floats(Shape shape) { return zeros(shape, DType::F32); }

TEST(elementwise_errors, non_broadcastable_shapes_name_op_and_shapes) {
  std::string message = error_of([] { add(floats({2, 3}), floats({4})); });
  EXPECT_THAT(message, HasSubstr("add"));
  EXPECT_THAT(message, HasSubstr("[2, 3]"));
  EXPECT_THAT(message, HasSubstr("[4]"));
  message = error_of([] { lt(floats({5, 1}), floats({3, 4})); });
  EXPECT_THAT(message, HasSubstr("lt"));
  EXPECT_THAT(message, HasSubstr("[5, 1]"));
  EXPECT_THAT(message, HasSubstr("[3, 4]"));
  message = error_of([] { where(zeros({3}, DType::U8), floats({2}), floats({3})); });
  EXPECT_THAT(message, HasSubstr("where"));
}

TEST(elementwise_errors, float_op_on_integers_names_op_and_dtype) {
  Tensor ints = zeros({3}, DType::I32);
  std::string message = error_of([&] { exp(ints); });
  EXPECT_THAT(message, HasSubstr("exp"));
  EXPECT_THAT(message, HasSubstr("i32"));
  message = error_of([&] { gelu_tanh(zeros({2}, DType::U8)); });
  EXPECT_THAT(message, HasSubstr("gelu_tanh"));
  EXPECT_THAT(message, HasSubstr("u8"));
  message = error_of([&] { mean(ints); });
  EXPECT_THAT(message, HasSubstr("mean"));
  EXPECT_THAT(message, HasSubstr("i32"));
  message = error_of([&] { softmax(ints, 0); });
  EXPECT_THAT(message, HasSubstr("softmax"));
  EXPECT_THAT(message, HasSubstr("i32"));
  // A fractional scalar with an integer tensor would silently truncate: refused.
  message = error_of([&] { mul(ints, 0.5); });
  EXPECT_THAT(message, HasSubstr("mul"));
  EXPECT_THAT(message, HasSubstr("i32"));
}

TEST(elementwise_errors, bad_axis_names_op) {
  Tensor x = floats({2, 3});
  EXPECT_THAT(error_of([&] { sum(x, {2}); }), HasSubstr("sum"));
  EXPECT_THAT(error_of([&] { max(x, {-3}); }), HasSubstr("max"));
  EXPECT_THAT(error_of([&] { argmax(x, {1, -1}); }), HasSubstr("argmax"));  // repeated axis
  EXPECT_THAT(error_of([&] { logsumexp(x, {5}, true); }), HasSubstr("logsumexp"));
  EXPECT_THAT(error_of([&] { softmax(x, 2); }), HasSubstr("softmax"));
  EXPECT_THAT(error_of([&] { log_softmax(x, -3); }), HasSubstr("log_softmax"));
  EXPECT_THAT(error_of([&] { max(floats({2, 0}), {1}); }), HasSubstr("max"));  // empty axis
}

TEST(elementwise_errors, creation_arguments) {
  EXPECT_THAT(error_of([] { arange(0, 5, 0); }), HasSubstr("arange"));
  EXPECT_THAT(error_of([] { arange(0, 5, -1); }), HasSubstr("arange"));
  EXPECT_THAT(error_of([] { full({2, -1}, 1.0); }), HasSubstr("full"));
}

// ---- documented edge rules ----

TEST(elementwise_rules, integer_division_truncates_and_division_by_zero_is_zero) {
  Tensor a = Tensor::from_vector<int32_t>({7, -7, 5, std::numeric_limits<int32_t>::min(), 9}, {5});
  Tensor b = Tensor::from_vector<int32_t>({2, 2, 0, -1, -4}, {5});
  EXPECT_EQ(div(a, b).to_vector<int32_t>(),
            (std::vector<int32_t>{3, -3, 0, std::numeric_limits<int32_t>::min(), -2}));
  EXPECT_EQ(div(a, 0.0).to_vector<int32_t>(), (std::vector<int32_t>{0, 0, 0, 0, 0}));
}

TEST(elementwise_rules, integer_arithmetic_wraps) {
  Tensor a = Tensor::from_vector<int8_t>({120, -128}, {2});
  EXPECT_EQ(add(a, 10.0).to_vector<int8_t>(), (std::vector<int8_t>{-126, -118}));
  EXPECT_EQ(neg(a).to_vector<int8_t>(), (std::vector<int8_t>{-120, -128}));
}

TEST(elementwise_rules, nan_propagates_through_max_and_wins_argmax) {
  float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = Tensor::from_vector<float>({1, nan, 3, nan}, {4});
  EXPECT_TRUE(std::isnan(max(x).item()));
  EXPECT_EQ(argmax(x).item(), 1.0);
  EXPECT_TRUE(std::isnan(maximum(x, 2.0).to_vector<float>()[1]));
  // A NaN condition is nonzero, so it selects a.
  Tensor picked = where(x, Tensor::scalar(1.0), Tensor::scalar(0.0));
  EXPECT_EQ(picked.to_vector<float>(), (std::vector<float>{1, 1, 1, 1}));
}

TEST(elementwise_rules, empty_reductions) {
  Tensor empty = floats({3, 0});
  EXPECT_EQ(sum(empty, {1}).to_vector<float>(), (std::vector<float>{0, 0, 0}));
  EXPECT_TRUE(std::isnan(mean(empty, {1}).to_vector<float>()[0]));
  EXPECT_EQ(logsumexp(empty, {1}).to_vector<float>()[0], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(sum(floats({0, 4}), {1}).shape(), (Shape{0}));
}

TEST(elementwise_rules, reductions_of_a_scalar_tensor) {
  Tensor x = Tensor::scalar(2.5);
  EXPECT_EQ(sum(x).item(), 2.5);
  EXPECT_EQ(sum(x, {0}, true).shape(), Shape{});
  EXPECT_EQ(softmax(x, -1).item(), 1.0);
  EXPECT_EQ(argmax(x).item(), 0.0);
}

TEST(elementwise_rules, sum_of_integers_is_i64_and_argmax_is_i64) {
  Tensor x = Tensor::from_vector<uint8_t>({200, 200, 7}, {3});
  Tensor s = sum(x);
  EXPECT_EQ(s.dtype(), DType::I64);
  EXPECT_EQ(s.item(), 407.0);
  EXPECT_EQ(argmax(x).dtype(), DType::I64);
  EXPECT_EQ(argmax(x).item(), 0.0);  // tie between 0 and 1: the first
}

TEST(elementwise_rules, var_correction) {
  Tensor x = Tensor::from_vector<double>({1, 2, 3, 4}, {4});
  EXPECT_DOUBLE_EQ(var(x).item(), 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(var(x, {}, false, 0.0).item(), 1.25);
  EXPECT_TRUE(std::isnan(var(Tensor::from_vector<double>({1}, {1})).item()));  // 0 / 0
}

}  // namespace
}  // namespace wick
