// Attention on head-split views (runtime/ops/attention.h): q, k, v taken as [B, H, L, D] views of
// [B, L, H·D] projections give the same results as contiguous copies, the output and the gradients
// come back in the operands' memory order (so merging heads is a view), and broadcast gradients work.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/ops/attention.h"
#include "runtime/ops/creation.h"

namespace wick {
namespace {

Tensor filled(const Shape& shape, float seed) {
  std::vector<float> values(static_cast<size_t>(numel(shape)));
  for (size_t i = 0; i < values.size(); ++i) values[i] = std::sin(seed + 0.37f * static_cast<float>(i));
  return Tensor::from_vector<float>(values, shape);
}

// [B, L, H·D] -> the [B, H, L, D] view (no copy).
Tensor split_heads(const Tensor& t, int64_t heads) {
  return t.reshape({t.size(0), t.size(1), heads, t.size(2) / heads}).transpose(1, 2);
}

struct Problem {
  Tensor q, k, v, grad_out;
};

// q from a [B, Lq, H·D] projection; k and v the two halves of one [B, Lk, 2·H·D] projection.
Problem head_split_problem(int64_t batch, int64_t heads, int64_t n_q, int64_t n_k, int64_t d) {
  Tensor q_proj = filled({batch, n_q, heads * d}, 0.1f);
  Tensor kv_proj = filled({batch, n_k, 2 * heads * d}, 0.7f);
  Problem p;
  p.q = split_heads(q_proj, heads);
  p.k = split_heads(kv_proj.narrow(2, 0, heads * d), heads);
  p.v = split_heads(kv_proj.narrow(2, heads * d, heads * d), heads);
  p.grad_out = split_heads(filled({batch, n_q, heads * d}, 1.3f), heads);
  return p;
}

TEST(AttentionLayouts, HeadSplitViewsGiveTheResultsOfContiguousCopies) {
  Problem p = head_split_problem(3, 4, 11, 13, 8);
  ASSERT_FALSE(p.q.is_contiguous());
  ASSERT_FALSE(p.k.is_contiguous());
  std::vector<uint8_t> keep;
  for (int64_t i = 0; i < 3 * 13; ++i) keep.push_back(i % 5 == 3 ? 0 : 1);
  Tensor mask = Tensor::from_vector<uint8_t>(keep, {3, 1, 1, 13});
  AttentionResult views = scaled_dot_product_attention(p.q, p.k, p.v, mask);
  AttentionResult dense =
      scaled_dot_product_attention(p.q.contiguous(), p.k.contiguous(), p.v.contiguous(), mask);
  EXPECT_EQ(views.out.to_vector<float>(), dense.out.to_vector<float>());
  EXPECT_EQ(views.logsumexp.to_vector<float>(), dense.logsumexp.to_vector<float>());
  // The output lies in q's memory order: [B, Lq, H, Dv], so transpose(1, 2) is contiguous.
  EXPECT_TRUE(views.out.transpose(1, 2).is_contiguous());

  AttentionGrads g_views =
      scaled_dot_product_attention_backward(p.grad_out, p.q, p.k, p.v, views.out, views.logsumexp, mask);
  AttentionGrads g_dense = scaled_dot_product_attention_backward(p.grad_out.contiguous(), p.q.contiguous(),
                                                                 p.k.contiguous(), p.v.contiguous(),
                                                                 dense.out, dense.logsumexp, mask);
  EXPECT_EQ(g_views.grad_q.to_vector<float>(), g_dense.grad_q.to_vector<float>());
  EXPECT_EQ(g_views.grad_k.to_vector<float>(), g_dense.grad_k.to_vector<float>());
  EXPECT_EQ(g_views.grad_v.to_vector<float>(), g_dense.grad_v.to_vector<float>());
  for (const Tensor* g : {&g_views.grad_q, &g_views.grad_k, &g_views.grad_v})
    EXPECT_TRUE(g->transpose(1, 2).is_contiguous()) << g->describe();
  EXPECT_TRUE(g_dense.grad_q.is_contiguous());
}

TEST(AttentionLayouts, BroadcastGradientAndCausalMaskMatchDense) {
  Problem p = head_split_problem(2, 2, 9, 9, 4);
  AttentionResult r = scaled_dot_product_attention(p.q, p.k, p.v, Tensor(), std::nullopt, /*is_causal=*/true);
  // The gradient of a sum over queries: a [B, H, 1, D] row broadcast along Lq (stride 0).
  Tensor row = filled({2, 2, 1, 4}, 0.9f);
  Tensor broadcast = row.expand({2, 2, 9, 4});
  AttentionGrads a = scaled_dot_product_attention_backward(broadcast, p.q, p.k, p.v, r.out, r.logsumexp, Tensor(),
                                                           std::nullopt, true);
  AttentionGrads b = scaled_dot_product_attention_backward(broadcast.contiguous(), p.q.contiguous(),
                                                           p.k.contiguous(), p.v.contiguous(), r.out.contiguous(),
                                                           r.logsumexp, Tensor(), std::nullopt, true);
  EXPECT_EQ(a.grad_q.to_vector<float>(), b.grad_q.to_vector<float>());
  EXPECT_EQ(a.grad_k.to_vector<float>(), b.grad_k.to_vector<float>());
  EXPECT_EQ(a.grad_v.to_vector<float>(), b.grad_v.to_vector<float>());
}

}  // namespace
}  // namespace wick
