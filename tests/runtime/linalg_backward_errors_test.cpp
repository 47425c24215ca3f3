// Bad shapes and dtypes for the conv2d and norm backward ops throw WickError naming the op.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/error_of.h"

#include <string>

#include "runtime/ops/conv.h"
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

TEST(LinalgBackwardErrors, ConvBackwardInputChecksGradShape) {
  // x [1, 2, 5, 5] with a 3x3 kernel gives [1, 4, 3, 3], not [1, 4, 5, 5].
  std::string message = error_of([] { conv2d_backward_input(zeros({1, 4, 5, 5}), zeros({4, 2, 3, 3}), {1, 2, 5, 5}); });
  EXPECT_THAT(message, HasSubstr("conv2d_backward_input"));
  EXPECT_THAT(message, HasSubstr("[1, 4, 3, 3]"));
  EXPECT_THAT(error_of([] { conv2d_backward_input(zeros({1, 4, 3, 3}), zeros({4, 3, 3, 3}), {1, 2, 5, 5}); }),
              HasSubstr("conv2d_backward_input"));
  EXPECT_THAT(error_of([] {
                conv2d_backward_input(zeros({1, 4, 3, 3}), zeros({4, 2, 3, 3}), {1, 2, 5, 5}, {0, 1});
              }),
              HasSubstr("stride"));
}

TEST(LinalgBackwardErrors, ConvBackwardWeightChecksShapesAndDtypes) {
  EXPECT_THAT(error_of([] { conv2d_backward_weight(zeros({1, 4, 3, 3}), zeros({1, 2, 5}), {4, 2, 3, 3}); }),
              HasSubstr("conv2d_backward_weight"));
  EXPECT_THAT(error_of([] {
                conv2d_backward_weight(zeros({1, 4, 3, 3}), zeros({1, 2, 5, 5}, DType::I32), {4, 2, 3, 3});
              }),
              HasSubstr("conv2d_backward_weight"));
  // groups = 3 does not divide 2 channels.
  EXPECT_THAT(error_of([] {
                conv2d_backward_weight(zeros({1, 3, 3, 3}), zeros({1, 2, 5, 5}), {3, 1, 3, 3}, {1, 1}, {0, 0}, {1, 1},
                                       3);
              }),
              HasSubstr("groups"));
}

TEST(LinalgBackwardErrors, NormBackwardChecksStatistics) {
  std::string message = error_of([] {
    layer_norm_backward(zeros({3, 8}), zeros({3, 8}), zeros({4}), zeros({4}));
  });
  EXPECT_THAT(message, HasSubstr("layer_norm_backward"));
  EXPECT_THAT(message, HasSubstr("[3]"));
  EXPECT_THAT(error_of([] { layer_norm_backward(zeros({3, 7}), zeros({3, 8}), zeros({3}), zeros({3})); }),
              HasSubstr("layer_norm_backward"));
  EXPECT_THAT(error_of([] { rms_norm_backward(zeros({3, 8}), zeros({3, 8}), zeros({3}), zeros({7})); }),
              HasSubstr("rms_norm_backward"));
  EXPECT_THAT(error_of([] { group_norm_backward(zeros({2, 6, 4}), zeros({2, 6, 4}), zeros({2, 4}), zeros({2, 4})); }),
              HasSubstr("group_norm_backward"));
  EXPECT_THAT(error_of([] {
                group_norm_backward(zeros({2, 6, 4}), zeros({2, 6, 4}, DType::I64), zeros({2, 3}), zeros({2, 3}));
              }),
              HasSubstr("group_norm_backward"));
}

}  // namespace
}  // namespace wick
