// Errors and edge cases of runtime/ops/attention.h's backward (values are covered by the op harness in
// ops_attention_backward_cases.cpp).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/error.h"
#include "runtime/ops/attention.h"
#include "runtime/ops/creation.h"

namespace wick {
namespace {

using ::testing::HasSubstr;

std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const WickError& e) {
    return e.what();
  }
  return "";
}

Tensor filled(const Shape& shape, float seed) {
  std::vector<float> values(static_cast<size_t>(numel(shape)));
  for (size_t i = 0; i < values.size(); ++i) values[i] = std::sin(seed + 0.7f * static_cast<float>(i));
  return Tensor::from_vector<float>(values, shape);
}

TEST(AttentionBackward, RejectsMismatchedGradOut) {
  Tensor q = filled({1, 2, 3, 4}, 0), k = filled({1, 2, 5, 4}, 1), v = filled({1, 2, 5, 6}, 2);
  AttentionResult r = scaled_dot_product_attention(q, k, v);
  Tensor bad = filled({1, 2, 3, 4}, 3);  // Dv is 6
  std::string msg = message_of([&] { scaled_dot_product_attention_backward(bad, q, k, v, r.out, r.logsumexp); });
  EXPECT_THAT(msg, HasSubstr("scaled_dot_product_attention_backward"));
  EXPECT_THAT(msg, HasSubstr("grad_out"));
}

TEST(AttentionBackward, RejectsBadLogsumexpAndInputs) {
  Tensor q = filled({1, 2, 3, 4}, 0), k = filled({1, 2, 5, 4}, 1), v = filled({1, 2, 5, 6}, 2);
  AttentionResult r = scaled_dot_product_attention(q, k, v);
  Tensor go = filled({1, 2, 3, 6}, 3);
  std::string msg = message_of(
      [&] { scaled_dot_product_attention_backward(go, q, k, v, r.out, r.logsumexp.reshape({2, 3})); });
  EXPECT_THAT(msg, HasSubstr("scaled_dot_product_attention_backward"));
  EXPECT_THAT(msg, HasSubstr("logsumexp"));
  msg = message_of([&] { scaled_dot_product_attention_backward(go, q, filled({1, 2, 5, 3}, 1), v, r.out, r.logsumexp); });
  EXPECT_THAT(msg, HasSubstr("scaled_dot_product_attention_backward"));
  msg = message_of([&] {
    scaled_dot_product_attention_backward(go, q, k, v, r.out, r.logsumexp, Tensor::empty({3, 4}, DType::U8));
  });
  EXPECT_THAT(msg, HasSubstr("broadcast"));
  msg = message_of([&] {
    scaled_dot_product_attention_backward(go.to(DType::I32), q, k, v, r.out, r.logsumexp);
  });
  EXPECT_THAT(msg, HasSubstr("floating"));
}

TEST(AttentionBackward, FullyMaskedRowGivesZeroGradientsWithoutNan) {
  Tensor q = filled({1, 1, 2, 4}, 0), k = filled({1, 1, 3, 4}, 1), v = filled({1, 1, 3, 4}, 2);
  Tensor mask = Tensor::from_vector<uint8_t>({0, 0, 0, 1, 0, 1}, {2, 3});  // row 0 keeps nothing
  AttentionResult r = scaled_dot_product_attention(q, k, v, mask);
  Tensor go = filled({1, 1, 2, 4}, 5);
  AttentionGrads g = scaled_dot_product_attention_backward(go, q, k, v, r.out, r.logsumexp, mask);
  std::vector<float> grad_q = g.grad_q.to_vector<float>(), grad_k = g.grad_k.to_vector<float>(),
                     grad_v = g.grad_v.to_vector<float>();
  for (int e = 0; e < 4; ++e) EXPECT_EQ(grad_q[e], 0.0f);
  for (float x : grad_q) EXPECT_TRUE(std::isfinite(x));
  for (float x : grad_k) EXPECT_TRUE(std::isfinite(x));
  // Key 1 is dropped by every row: no gradient reaches it.
  for (int e = 0; e < 4; ++e) EXPECT_EQ(grad_k[4 + e], 0.0f);
  for (int e = 0; e < 4; ++e) EXPECT_EQ(grad_v[4 + e], 0.0f);
  // Row 1 keeps keys 0 and 2: they receive gradient.
  double sum_v = 0;
  for (int e = 0; e < 4; ++e) sum_v += std::fabs(grad_v[e]) + std::fabs(grad_v[8 + e]);
  EXPECT_GT(sum_v, 0.0);
}

TEST(AttentionBackward, GradientsKeepInputDtypeAndBackendNameOnCpu) {
  Tensor q = filled({1, 2, 3, 8}, 0).to(DType::BF16), k = filled({1, 2, 5, 8}, 1).to(DType::BF16),
         v = filled({1, 2, 5, 8}, 2).to(DType::BF16);
  AttentionResult r = scaled_dot_product_attention(q, k, v);
  Tensor go = filled({1, 2, 3, 8}, 3);  // f32 grad_out for a bf16 output is accepted
  AttentionGrads g = scaled_dot_product_attention_backward(go, q, k, v, r.out, r.logsumexp);
  EXPECT_EQ(g.grad_q.dtype(), DType::BF16);
  EXPECT_EQ(g.grad_k.dtype(), DType::BF16);
  EXPECT_EQ(g.grad_v.dtype(), DType::BF16);
  EXPECT_EQ(g.grad_k.shape(), k.shape());
  EXPECT_EQ(attention_backward_backend_name(q, k, v), "cpu");
}

TEST(AttentionBackward, NoQueriesGiveZeroKeyGradients) {
  Tensor q = Tensor::empty({1, 2, 0, 4}, DType::F32), k = filled({1, 2, 3, 4}, 1), v = filled({1, 2, 3, 4}, 2);
  AttentionResult r = scaled_dot_product_attention(q, k, v);
  AttentionGrads g =
      scaled_dot_product_attention_backward(Tensor::empty({1, 2, 0, 4}, DType::F32), q, k, v, r.out, r.logsumexp);
  EXPECT_EQ(g.grad_q.numel(), 0);
  for (float x : g.grad_k.to_vector<float>()) EXPECT_EQ(x, 0.0f);
  for (float x : g.grad_v.to_vector<float>()) EXPECT_EQ(x, 0.0f);
}

}  // namespace
}  // namespace wick
