// Bad arguments to the index, join, layout, rope and attention ops throw WickError naming the op.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/error_of.h"

#include <functional>
#include <string>

#include "runtime/ops/attention.h"
#include "runtime/ops/index.h"
#include "runtime/ops/join.h"
#include "runtime/ops/layout.h"
#include "runtime/ops/rope.h"

namespace wick {
namespace {

using ::testing::HasSubstr;

using wick::testing::error_of;

Tensor zeros(const Shape& shape, DType dtype = DType::F32) {
  return Tensor::from_vector<float>(std::vector<float>(static_cast<size_t>(numel(shape)), 0.0f), shape).to(dtype);
}

TEST(ShapesErrors, IndexOutOfRangeNamesOpAndIndex) {
  Tensor x = zeros({5, 3});
  std::string msg = error_of([&] { index_select(x, 0, Tensor::from_vector<int64_t>({1, 7}, {2})); });
  EXPECT_THAT(msg, HasSubstr("index_select"));
  EXPECT_THAT(msg, HasSubstr("index 7"));
  msg = error_of([&] { embedding(x, Tensor::from_vector<int32_t>({-1}, {1})); });
  EXPECT_THAT(msg, HasSubstr("embedding"));
  EXPECT_THAT(msg, HasSubstr("index -1"));
  msg = error_of([&] { gather(x, 1, Tensor::from_vector<int64_t>({0, 3}, {1, 2})); });
  EXPECT_THAT(msg, HasSubstr("gather"));
  EXPECT_THAT(msg, HasSubstr("index 3"));
  msg = error_of([&] { scatter_add(x, 0, Tensor::from_vector<int64_t>({5}, {1, 1}), zeros({1, 1})); });
  EXPECT_THAT(msg, HasSubstr("scatter_add"));
  EXPECT_THAT(msg, HasSubstr("index 5"));
}

TEST(ShapesErrors, IndexDtypeAndShapeChecks) {
  Tensor x = zeros({5, 3});
  EXPECT_THAT(error_of([&] { index_select(x, 0, zeros({2})); }), HasSubstr("index_select"));
  EXPECT_THAT(error_of([&] { gather(x, 0, Tensor::from_vector<int64_t>({0}, {1})); }), HasSubstr("gather"));
  EXPECT_THAT(error_of([&] { embedding(zeros({5}), Tensor::from_vector<int64_t>({0}, {1})); }),
              HasSubstr("embedding"));
}

TEST(ShapesErrors, JoinChecks) {
  std::string msg = error_of([&] { concat({zeros({2, 3}), zeros({3, 3})}, 1); });
  EXPECT_THAT(msg, HasSubstr("concat"));
  EXPECT_THAT(msg, HasSubstr("[3, 3]"));
  EXPECT_THAT(error_of([&] { concat({}, 0); }), HasSubstr("concat"));
  EXPECT_THAT(error_of([&] { stack({zeros({2}), zeros({3})}, 0); }), HasSubstr("stack"));
  EXPECT_THAT(error_of([&] { split(zeros({5}), std::vector<int64_t>{2, 2}, 0); }), HasSubstr("split"));
  EXPECT_THAT(error_of([&] { chunk(zeros({5}), 0, 0); }), HasSubstr("chunk"));
  EXPECT_THAT(error_of([&] { pad(zeros({2, 3}), {3, 0}, PadMode::Reflect); }), HasSubstr("pad"));
  EXPECT_THAT(error_of([&] { pad(zeros({2, 3}), {1}); }), HasSubstr("pad"));
  EXPECT_THAT(error_of([&] { pad(zeros({2, 3}), {1, 1, 1, 1, 1, 1}); }), HasSubstr("pad"));
}

TEST(ShapesErrors, LayoutChecks) {
  EXPECT_THAT(error_of([&] { pixel_shuffle(zeros({1, 6, 2, 2}), 2); }), HasSubstr("pixel_shuffle"));
  EXPECT_THAT(error_of([&] { pixel_unshuffle(zeros({1, 1, 3, 4}), 2); }), HasSubstr("pixel_unshuffle"));
  EXPECT_THAT(error_of([&] { patchify(zeros({1, 1, 3, 4}), 2); }), HasSubstr("patchify"));
  EXPECT_THAT(error_of([&] { unpatchify(zeros({1, 5, 4}), 2, 4, 4); }), HasSubstr("unpatchify"));
}

TEST(ShapesErrors, RopeChecks) {
  Tensor table = zeros({4, 2});
  EXPECT_THAT(error_of([&] { apply_rope(zeros({1, 1, 4, 5}), table, table); }), HasSubstr("apply_rope"));
  EXPECT_THAT(error_of([&] { apply_rope(zeros({1, 1, 3, 4}), table, table); }), HasSubstr("apply_rope"));
  EXPECT_THAT(error_of([&] { rope_frequencies(zeros({4, 2}), {2, 3}); }), HasSubstr("rope_frequencies"));
  EXPECT_THAT(error_of([&] { rope_frequencies(zeros({4, 2}), {2, 2, 2}); }), HasSubstr("rope_frequencies"));
}

TEST(ShapesErrors, AttentionChecks) {
  Tensor q = zeros({1, 2, 3, 8}), k = zeros({1, 2, 5, 4}), v = zeros({1, 2, 5, 8});
  std::string msg = error_of([&] { scaled_dot_product_attention(q, k, v); });
  EXPECT_THAT(msg, HasSubstr("scaled_dot_product_attention"));
  EXPECT_THAT(msg, HasSubstr("head dim"));
  Tensor k8 = zeros({1, 2, 5, 8});
  EXPECT_THAT(error_of([&] { scaled_dot_product_attention(q, k8, zeros({1, 2, 4, 8})); }),
              HasSubstr("scaled_dot_product_attention"));
  EXPECT_THAT(error_of([&] { scaled_dot_product_attention(q, k8, v, zeros({3, 4})); }),
              HasSubstr("scaled_dot_product_attention"));
  EXPECT_THAT(error_of([&] { scaled_dot_product_attention(q, k8, v, zeros({3, 5}, DType::I32)); }),
              HasSubstr("scaled_dot_product_attention"));
  EXPECT_THAT(error_of([&] { scaled_dot_product_attention(q, k8.to(DType::BF16), v); }),
              HasSubstr("scaled_dot_product_attention"));
  EXPECT_THAT(error_of([&] { scaled_dot_product_attention(zeros({2, 3, 8}), k8, v); }),
              HasSubstr("scaled_dot_product_attention"));
}

}  // namespace
}  // namespace wick
