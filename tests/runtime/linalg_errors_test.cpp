// Bad shapes and dtypes for matmul, linear, conv2d and the norms throw WickError naming the op.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/error_of.h"

#include <string>

#include "runtime/ops/conv.h"
#include "runtime/ops/matmul.h"
#include "runtime/ops/norm.h"

namespace wick {
namespace {

using ::testing::HasSubstr;

using wick::testing::error_of;

Tensor zeros(const Shape& shape, DType dtype = DType::F32) {
  Tensor t = Tensor::empty(shape, dtype);
  t.copy_from(Tensor::scalar(0.0, dtype));
  return t;
}

TEST(LinalgErrors, MatmulInnerDimensionsNameBothShapes) {
  std::string message = error_of([] { matmul(zeros({3, 4}), zeros({5, 6})); });
  EXPECT_THAT(message, HasSubstr("matmul"));
  EXPECT_THAT(message, HasSubstr("[3, 4]"));
  EXPECT_THAT(message, HasSubstr("[5, 6]"));
  EXPECT_THAT(error_of([] { matmul(zeros({2, 3, 4}), zeros({7})); }), HasSubstr("matmul"));
}

TEST(LinalgErrors, MatmulBatchMustBroadcast) {
  std::string message = error_of([] { matmul(zeros({2, 3, 4}), zeros({3, 4, 5})); });
  EXPECT_THAT(message, HasSubstr("matmul"));
}

TEST(LinalgErrors, MatmulRejectsIntegersAndScalars) {
  EXPECT_THAT(error_of([] { matmul(zeros({2, 2}, DType::I32), zeros({2, 2}, DType::I32)); }), HasSubstr("matmul"));
  EXPECT_THAT(error_of([] { matmul(zeros({2, 2}), zeros({2, 2}, DType::I64)); }), HasSubstr("floating"));
  EXPECT_THAT(error_of([] { matmul(Tensor::scalar(1.0), zeros({2})); }), HasSubstr("matmul"));
  EXPECT_THAT(error_of([] { matmul(zeros({3}), zeros({3}), true, false); }), HasSubstr("transpose_a"));
}

TEST(LinalgErrors, LinearChecksFeaturesAndBias) {
  EXPECT_THAT(error_of([] { linear(zeros({2, 5}), zeros({3, 4})); }), HasSubstr("linear"));
  EXPECT_THAT(error_of([] { linear(zeros({2, 4}), zeros({3, 4}), zeros({4})); }), HasSubstr("bias"));
  EXPECT_THAT(error_of([] { linear(zeros({2, 4}, DType::U8), zeros({3, 4}, DType::U8)); }), HasSubstr("linear"));
}

TEST(LinalgErrors, Conv2dChannelMismatch) {
  std::string message = error_of([] { conv2d(zeros({1, 3, 5, 5}), zeros({4, 2, 3, 3})); });
  EXPECT_THAT(message, HasSubstr("conv2d"));
  EXPECT_THAT(message, HasSubstr("channel"));
  // Groups must divide the channels, and the weight must carry C / groups input channels.
  EXPECT_THAT(error_of([] { conv2d(zeros({1, 4, 5, 5}), zeros({4, 4, 3, 3}), {}, {1, 1}, {0, 0}, {1, 1}, 2); }),
              HasSubstr("conv2d"));
  EXPECT_THAT(error_of([] { conv2d(zeros({1, 3, 5, 5}), zeros({3, 1, 3, 3}), {}, {1, 1}, {0, 0}, {1, 1}, 2); }),
              HasSubstr("groups"));
}

TEST(LinalgErrors, Conv2dGeometryAndDtype) {
  EXPECT_THAT(error_of([] { conv2d(zeros({1, 3, 2, 2}), zeros({4, 3, 3, 3})); }), HasSubstr("smaller"));
  EXPECT_THAT(error_of([] { conv2d(zeros({1, 3, 5, 5}), zeros({4, 3, 3, 3}), {}, {0, 1}); }), HasSubstr("stride"));
  EXPECT_THAT(error_of([] { conv2d(zeros({3, 5, 5}), zeros({4, 3, 3, 3})); }), HasSubstr("conv2d"));
  EXPECT_THAT(error_of([] { conv2d(zeros({1, 3, 5, 5}), zeros({4, 3, 3, 3}), zeros({5})); }), HasSubstr("bias"));
  EXPECT_THAT(error_of([] { conv2d(zeros({1, 3, 5, 5}, DType::I32), zeros({4, 3, 3, 3}, DType::I32)); }),
              HasSubstr("floating"));
}

TEST(LinalgErrors, NormsCheckShapesAndDtypes) {
  EXPECT_THAT(error_of([] { layer_norm(zeros({2, 5}), {4}); }), HasSubstr("layer_norm"));
  EXPECT_THAT(error_of([] { layer_norm(zeros({2, 5}), {5}, zeros({4})); }), HasSubstr("weight"));
  EXPECT_THAT(error_of([] { layer_norm(zeros({2, 5}, DType::I32), {5}); }), HasSubstr("floating"));
  EXPECT_THAT(error_of([] { rms_norm(zeros({2, 5}), zeros({6})); }), HasSubstr("rms_norm"));
  EXPECT_THAT(error_of([] { rms_norm(zeros({2, 5}, DType::I64)); }), HasSubstr("rms_norm"));
  EXPECT_THAT(error_of([] { group_norm(zeros({2, 6, 3}), 4); }), HasSubstr("group_norm"));
  EXPECT_THAT(error_of([] { group_norm(zeros({6}), 2); }), HasSubstr("group_norm"));
  EXPECT_THAT(error_of([] { group_norm(zeros({2, 6, 3}), 3, zeros({3})); }), HasSubstr("weight"));
}

// The statistics come back in f32 for 16-bit inputs, with the documented shapes.
TEST(LinalgErrors, NormStatisticsAreF32) {
  Tensor x = zeros({2, 3, 8}, DType::BF16);
  LayerNormResult r = layer_norm(x, {8});
  EXPECT_EQ(r.y.dtype(), DType::BF16);
  EXPECT_EQ(r.mean.dtype(), DType::F32);
  EXPECT_EQ(r.rstd.shape(), (Shape{2, 3}));
  GroupNormResult g = group_norm(zeros({2, 4, 3}, DType::F16), 2);
  EXPECT_EQ(g.rstd.dtype(), DType::F32);
  EXPECT_EQ(g.mean.shape(), (Shape{2, 2}));
  EXPECT_EQ(rms_norm(zeros({5}, DType::F64)).rstd.dtype(), DType::F64);
}

}  // namespace
}  // namespace wick
