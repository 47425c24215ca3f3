// Op-harness entries for runtime/ops/attention.h, checked against an explicit softmax in double.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "runtime/ops/attention.h"
#include "tests/runtime/op_harness.h"

// InputSpec::dtype (a std::optional without a default member initializer) makes GCC flag every
// designated initializer that leaves it out; leaving it out is the intended use.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace wick::testing {
namespace {

enum class RefMask { None, Keep, Additive };

// q [B, H, Lq, D], k [B, H, Lk, D], v [B, H, Lk, Dv]; mask broadcast to [B, H, Lq, Lk] by NumPy
// rules. Returns {out [B, H, Lq, Dv], logsumexp [B, H, Lq]}.
RefOutputs ref_attention(const RefTensor& q, const RefTensor& k, const RefTensor& v, const RefTensor* mask,
                         RefMask mask_kind, double scale, bool causal) {
  int64_t batch = q.shape[0], heads = q.shape[1], n_q = q.shape[2], d = q.shape[3], n_k = k.shape[2], dv = v.shape[3];
  RefTensor out = ref_like({batch, heads, n_q, dv}), lse = ref_like({batch, heads, n_q});
  auto mask_at = [&](int64_t b, int64_t h, int64_t i, int64_t j) {
    std::vector<int64_t> full = {b, h, i, j}, coords;
    size_t lead = 4 - mask->shape.size();
    for (size_t a = 0; a < mask->shape.size(); ++a) coords.push_back(mask->shape[a] == 1 ? 0 : full[lead + a]);
    return mask->at(linear_index(mask->shape, coords));
  };
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < n_q; ++i) {
        std::vector<double> scores(static_cast<size_t>(n_k));
        std::vector<bool> kept(static_cast<size_t>(n_k), true);
        for (int64_t j = 0; j < n_k; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < d; ++e)
            dot += q.at(linear_index(q.shape, {b, h, i, e})) * k.at(linear_index(k.shape, {b, h, j, e}));
          scores[j] = dot * scale;
          if (causal && j > i) kept[j] = false;
          if (mask_kind == RefMask::Keep && mask_at(b, h, i, j) == 0) kept[j] = false;
          if (mask_kind == RefMask::Additive) scores[j] += mask_at(b, h, i, j);
        }
        double max_score = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < n_k; ++j)
          if (kept[j]) max_score = std::max(max_score, scores[j]);
        double sum = 0;
        for (int64_t j = 0; j < n_k; ++j)
          if (kept[j]) sum += std::exp(scores[j] - max_score);
        lse.at(linear_index(lse.shape, {b, h, i})) =
            sum > 0 ? max_score + std::log(sum) : -std::numeric_limits<double>::infinity();
        for (int64_t e = 0; e < dv; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < n_k; ++j)
            if (kept[j]) acc += std::exp(scores[j] - max_score) / sum * v.at(linear_index(v.shape, {b, h, j, e}));
          out.at(linear_index(out.shape, {b, h, i, e})) = acc;
        }
      }
  return {out, lse};
}

Outputs both(const AttentionResult& r) { return {r.out, r.logsumexp}; }

InputSpec keep_mask(Shape shape) {
  return {.shape = std::move(shape), .low = 0, .high = 2, .integer = true, .dtype = DType::U8};
}

std::vector<OpCase> attention_cases() {
  const std::vector<DType> floats = {DType::F32, DType::BF16, DType::F16, DType::F64};
  // GPU paths (cuDNN rounds probabilities to bf16/f16 before P @ V) differ from the CPU more.
  const std::vector<std::pair<DType, Tolerance>> cuda_tol = {
      {DType::F32, {2e-5, 2e-5}}, {DType::BF16, {3e-2, 3e-2}}, {DType::F16, {5e-3, 5e-3}}};
  const std::vector<std::pair<DType, Tolerance>> cpu_tol = {{DType::F32, {2e-5, 2e-5}}};
  std::vector<OpCase> cases;
  cases.push_back({.name = "sdpa_cross_lq_ne_lk",
                   .inputs = {{.shape = {2, 3, 5, 8}}, {.shape = {2, 3, 7, 8}}, {.shape = {2, 3, 7, 8}}},
                   .run = [](const Inputs& x) { return both(scaled_dot_product_attention(x[0], x[1], x[2])); },
                   .reference =
                       [](const RefInputs& x) {
                         return ref_attention(x[0], x[1], x[2], nullptr, RefMask::None, 1 / std::sqrt(8.0), false);
                       },
                   .dtypes = floats,
                   .cpu_tolerance = cpu_tol,
                   .cuda_tolerance = cuda_tol});
  cases.push_back(
      {.name = "sdpa_value_dim_differs_custom_scale",
       .inputs = {{.shape = {2, 2, 6, 16}}, {.shape = {2, 2, 9, 16}}, {.shape = {2, 2, 9, 8}, .low = -2, .high = 2}},
       .run = [](const Inputs& x) { return both(scaled_dot_product_attention(x[0], x[1], x[2], {}, 0.3)); },
       .reference =
           [](const RefInputs& x) { return ref_attention(x[0], x[1], x[2], nullptr, RefMask::None, 0.3, false); },
       .dtypes = floats,
       .cpu_tolerance = cpu_tol,
       .cuda_tolerance = cuda_tol});
  cases.push_back(
      {.name = "sdpa_causal",
       .inputs = {{.shape = {1, 2, 9, 16}}, {.shape = {1, 2, 9, 16}}, {.shape = {1, 2, 9, 16}}},
       .run =
           [](const Inputs& x) { return both(scaled_dot_product_attention(x[0], x[1], x[2], {}, std::nullopt, true)); },
       .reference =
           [](const RefInputs& x) { return ref_attention(x[0], x[1], x[2], nullptr, RefMask::None, 0.25, true); },
       .dtypes = floats,
       .cpu_tolerance = cpu_tol,
       .cuda_tolerance = cuda_tol});
  cases.push_back(
      {.name = "sdpa_causal_fewer_queries_than_keys",  // top-left: query i sees keys 0..i
       .inputs = {{.shape = {2, 1, 4, 8}}, {.shape = {2, 1, 11, 8}}, {.shape = {2, 1, 11, 8}}},
       .run =
           [](const Inputs& x) { return both(scaled_dot_product_attention(x[0], x[1], x[2], {}, std::nullopt, true)); },
       .reference =
           [](const RefInputs& x) {
             return ref_attention(x[0], x[1], x[2], nullptr, RefMask::None, 1 / std::sqrt(8.0), true);
           },
       .dtypes = floats,
       .cpu_tolerance = cpu_tol,
       .cuda_tolerance = cuda_tol});
  cases.push_back(
      {.name = "sdpa_keep_mask_u8_broadcast_heads",
       .inputs = {{.shape = {2, 3, 5, 8}}, {.shape = {2, 3, 7, 8}}, {.shape = {2, 3, 7, 8}}, keep_mask({2, 1, 5, 7})},
       .run = [](const Inputs& x) { return both(scaled_dot_product_attention(x[0], x[1], x[2], x[3])); },
       .reference =
           [](const RefInputs& x) {
             return ref_attention(x[0], x[1], x[2], &x[3], RefMask::Keep, 1 / std::sqrt(8.0), false);
           },
       .dtypes = floats,
       .cpu_tolerance = cpu_tol,
       .cuda_tolerance = cuda_tol});
  cases.push_back({.name = "sdpa_additive_mask_2d_and_causal",
                   .inputs = {{.shape = {1, 2, 7, 8}},
                              {.shape = {1, 2, 7, 8}},
                              {.shape = {1, 2, 7, 8}},
                              {.shape = {7, 7}, .low = -3, .high = 1}},
                   .run =
                       [](const Inputs& x) {
                         return both(scaled_dot_product_attention(x[0], x[1], x[2], x[3], std::nullopt, true));
                       },
                   .reference =
                       [](const RefInputs& x) {
                         return ref_attention(x[0], x[1], x[2], &x[3], RefMask::Additive, 1 / std::sqrt(8.0), true);
                       },
                   .dtypes = floats,
                   .cpu_tolerance = cpu_tol,
                   .cuda_tolerance = cuda_tol});
  cases.push_back({.name = "sdpa_noncontiguous_inputs",
                   .inputs = {{.shape = {2, 2, 5, 8}, .non_contiguous = true},
                              {.shape = {2, 2, 6, 8}, .non_contiguous = true},
                              {.shape = {2, 2, 6, 8}, .non_contiguous = true}},
                   .run = [](const Inputs& x) { return both(scaled_dot_product_attention(x[0], x[1], x[2])); },
                   .reference =
                       [](const RefInputs& x) {
                         return ref_attention(x[0], x[1], x[2], nullptr, RefMask::None, 1 / std::sqrt(8.0), false);
                       },
                   .dtypes = floats,
                   .cpu_tolerance = cpu_tol,
                   .cuda_tolerance = cuda_tol});
  // Several query blocks (64 rows on the CPU, 8 per CUDA block) and key tiles; head dim 64.
  cases.push_back(
      {.name = "sdpa_multi_block_causal",
       .inputs = {{.shape = {1, 3, 130, 64}}, {.shape = {1, 3, 130, 64}}, {.shape = {1, 3, 130, 64}}},
       .run =
           [](const Inputs& x) { return both(scaled_dot_product_attention(x[0], x[1], x[2], {}, std::nullopt, true)); },
       .reference =
           [](const RefInputs& x) { return ref_attention(x[0], x[1], x[2], nullptr, RefMask::None, 0.125, true); },
       .dtypes = {DType::F32, DType::BF16, DType::F16},
       .cpu_tolerance = cpu_tol,
       .cuda_tolerance = cuda_tol});
  cases.push_back({.name = "sdpa_head_dim_128",
                   .inputs = {{.shape = {1, 2, 40, 128}}, {.shape = {1, 2, 70, 128}}, {.shape = {1, 2, 70, 128}}},
                   .run = [](const Inputs& x) { return both(scaled_dot_product_attention(x[0], x[1], x[2])); },
                   .reference =
                       [](const RefInputs& x) {
                         return ref_attention(x[0], x[1], x[2], nullptr, RefMask::None, 1 / std::sqrt(128.0), false);
                       },
                   .dtypes = {DType::F32, DType::BF16, DType::F16},
                   .cpu_tolerance = cpu_tol,
                   .cuda_tolerance = cuda_tol});
  return cases;
}
WICK_REGISTER_OP_CASES(attention_cases);

TEST(ShapesAttention, FullyMaskedRowGivesZeroAndMinusInfinity) {
  std::vector<float> values(2 * 3 * 4);
  for (size_t i = 0; i < values.size(); ++i) values[i] = std::sin(static_cast<float>(i));
  Tensor q = Tensor::from_vector<float>(std::vector<float>(values.begin(), values.begin() + 8), {1, 1, 2, 4});
  Tensor k = Tensor::from_vector<float>(std::vector<float>(values.begin(), values.begin() + 12), {1, 1, 3, 4});
  Tensor v = Tensor::from_vector<float>(std::vector<float>(values.begin() + 4, values.begin() + 16), {1, 1, 3, 4});
  // Row 0 keeps nothing, row 1 keeps key 2 only.
  Tensor mask = Tensor::from_vector<uint8_t>({0, 0, 0, 0, 0, 1}, {2, 3});
  AttentionResult r = scaled_dot_product_attention(q, k, v, mask);
  std::vector<float> out = r.out.to_vector<float>(), lse = r.logsumexp.to_vector<float>();
  for (int e = 0; e < 4; ++e) EXPECT_EQ(out[e], 0.0f);
  for (int e = 0; e < 4; ++e) EXPECT_FLOAT_EQ(out[4 + e], v.to_vector<float>()[8 + e]);
  EXPECT_TRUE(std::isinf(lse[0]) && lse[0] < 0);
  EXPECT_TRUE(std::isfinite(lse[1]));
  // A -inf additive mask behaves the same.
  Tensor additive = Tensor::from_vector<float>({-INFINITY, -INFINITY, -INFINITY, 0, 0, 0}, {2, 3});
  AttentionResult a = scaled_dot_product_attention(q, k, v, additive);
  for (int e = 0; e < 4; ++e) EXPECT_EQ(a.out.to_vector<float>()[e], 0.0f);
}

TEST(ShapesAttention, BackendNameOnCpu) {
  Tensor q = Tensor::empty({1, 1, 2, 8}, DType::BF16);
  EXPECT_EQ(attention_backend_name(q, q, q), "cpu");
}

TEST(ShapesAttention, OutputKeepsQueryDtype) {
  Tensor q = Tensor::from_vector<float>(std::vector<float>(16, 0.5f), {1, 1, 2, 8}).to(DType::F16);
  AttentionResult r = scaled_dot_product_attention(q, q, q);
  EXPECT_EQ(r.out.dtype(), DType::F16);
  EXPECT_EQ(r.logsumexp.dtype(), DType::F32);
  EXPECT_EQ(r.logsumexp.shape(), (Shape{1, 1, 2}));
}

}  // namespace
}  // namespace wick::testing
