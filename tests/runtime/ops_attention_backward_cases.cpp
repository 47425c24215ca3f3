// Op-harness entries for runtime/ops/attention.h's backward: wick's forward + backward against a
// float64 reference that forms the softmax explicitly and applies its Jacobian
// dP_j/dS_l = P_j (delta_jl - P_l) term by term (no flash-attention identities).
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

// q [B, H, Lq, D], k [B, H, Lk, D], v [B, H, Lk, Dv], grad_out [B, H, Lq, Dv]; mask broadcast to
// [B, H, Lq, Lk] by NumPy rules. Returns {grad_q, grad_k, grad_v} of L = sum(out * grad_out).
RefOutputs ref_attention_grads(const RefTensor& q, const RefTensor& k, const RefTensor& v, const RefTensor& grad_out,
                               const RefTensor* mask, RefMask mask_kind, double scale, bool causal) {
  const int64_t batch = q.shape[0], heads = q.shape[1], n_q = q.shape[2], d = q.shape[3], n_k = k.shape[2],
                dv = v.shape[3];
  RefTensor grad_q = ref_like(q.shape), grad_k = ref_like(k.shape), grad_v = ref_like(v.shape);
  auto mask_at = [&](int64_t b, int64_t h, int64_t i, int64_t j) {
    std::vector<int64_t> full = {b, h, i, j}, coords;
    size_t lead = 4 - mask->shape.size();
    for (size_t a = 0; a < mask->shape.size(); ++a) coords.push_back(mask->shape[a] == 1 ? 0 : full[lead + a]);
    return mask->at(linear_index(mask->shape, coords));
  };
  auto at = [](const RefTensor& t, int64_t b, int64_t h, int64_t i, int64_t e) {
    return t.at(linear_index(t.shape, {b, h, i, e}));
  };
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < n_q; ++i) {
        // Forward for row i: the kept scores and their softmax.
        std::vector<double> scores(static_cast<size_t>(n_k)), probs(static_cast<size_t>(n_k), 0.0);
        std::vector<bool> kept(static_cast<size_t>(n_k), true);
        for (int64_t j = 0; j < n_k; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < d; ++e) dot += at(q, b, h, i, e) * at(k, b, h, j, e);
          scores[j] = dot * scale;
          if (causal && j > i) kept[j] = false;
          if (mask_kind == RefMask::Keep && mask_at(b, h, i, j) == 0) kept[j] = false;
          if (mask_kind == RefMask::Additive) scores[j] += mask_at(b, h, i, j);
          if (std::isinf(scores[j]) && scores[j] < 0) kept[j] = false;
        }
        double max_score = -std::numeric_limits<double>::infinity(), sum = 0;
        for (int64_t j = 0; j < n_k; ++j)
          if (kept[j]) max_score = std::max(max_score, scores[j]);
        for (int64_t j = 0; j < n_k; ++j)
          if (kept[j]) sum += std::exp(scores[j] - max_score);
        if (sum == 0) continue;  // no kept key: out is the constant 0, no gradient
        for (int64_t j = 0; j < n_k; ++j)
          if (kept[j]) probs[j] = std::exp(scores[j] - max_score) / sum;
        // out_i = sum_j P_j v_j: dL/dv_j += P_j dO_i, dL/dP_j = dO_i . v_j.
        std::vector<double> grad_probs(static_cast<size_t>(n_k), 0.0);
        for (int64_t j = 0; j < n_k; ++j)
          for (int64_t e = 0; e < dv; ++e) {
            grad_v.at(linear_index(grad_v.shape, {b, h, j, e})) += probs[j] * at(grad_out, b, h, i, e);
            grad_probs[j] += at(grad_out, b, h, i, e) * at(v, b, h, j, e);
          }
        // dL/dS_l = sum_j dL/dP_j * P_j (delta_jl - P_l) over kept keys; S = scale * q.k (+ mask).
        for (int64_t l = 0; l < n_k; ++l) {
          if (!kept[l]) continue;
          double grad_score = 0;
          for (int64_t j = 0; j < n_k; ++j)
            if (kept[j]) grad_score += grad_probs[j] * probs[j] * ((j == l ? 1.0 : 0.0) - probs[l]);
          for (int64_t e = 0; e < d; ++e) {
            grad_q.at(linear_index(grad_q.shape, {b, h, i, e})) += grad_score * scale * at(k, b, h, l, e);
            grad_k.at(linear_index(grad_k.shape, {b, h, l, e})) += grad_score * scale * at(q, b, h, i, e);
          }
        }
      }
  return {grad_q, grad_k, grad_v};
}

Outputs grads(const AttentionGrads& g) { return {g.grad_q, g.grad_k, g.grad_v}; }

// Forward then backward with the same arguments (x = q, k, v, grad_out).
Outputs run_both(const Inputs& x, const Tensor& mask, std::optional<double> scale, bool causal) {
  AttentionResult r = scaled_dot_product_attention(x[0], x[1], x[2], mask, scale, causal);
  return grads(scaled_dot_product_attention_backward(x[3], x[0], x[1], x[2], r.out, r.logsumexp, mask, scale, causal));
}

InputSpec keep_mask(Shape shape) {
  return {.shape = std::move(shape), .low = 0, .high = 2, .integer = true, .dtype = DType::U8};
}

// Row `row` of a 2-D mask [Lq, Lk] set to `value` (drops every key of that query row).
Tensor with_row(const Tensor& mask, int64_t row, double value) {
  Tensor host = mask.to(Device::cpu()).to(DType::F64).contiguous().clone();
  double* data = host.data_as<double>();
  for (int64_t j = 0; j < mask.size(1); ++j) data[row * mask.size(1) + j] = value;
  return host.to(mask.dtype()).to(mask.device());
}
RefTensor with_row(RefTensor mask, int64_t row, double value) {
  for (int64_t j = 0; j < mask.shape[1]; ++j) mask.at(row * mask.shape[1] + j) = value;
  return mask;
}

std::vector<OpCase> attention_backward_cases() {
  const std::vector<DType> floats = {DType::F32, DType::BF16, DType::F16, DType::F64};
  // Against float64: 16-bit runs see out and the gradients rounded to 16 bits.
  const std::vector<std::pair<DType, Tolerance>> cpu_tol = {
      {DType::F32, {1e-4, 1e-4}}, {DType::BF16, {3e-2, 3e-2}}, {DType::F16, {5e-3, 5e-3}}, {DType::F64, {1e-10, 1e-10}}};
  // CUDA vs CPU: cuDNN keeps P and dS in 16 bits for its matmuls; the kernel path is f32 throughout.
  const std::vector<std::pair<DType, Tolerance>> cuda_tol = {
      {DType::F32, {1e-4, 1e-4}}, {DType::BF16, {6e-2, 6e-2}}, {DType::F16, {1e-2, 1e-2}}, {DType::F64, {1e-10, 1e-10}}};
  auto qkvo = [](Shape q, Shape k, Shape v) {
    Shape o = {q[0], q[1], q[2], v[3]};
    return std::vector<InputSpec>{{.shape = q}, {.shape = k}, {.shape = v}, {.shape = o}};
  };
  std::vector<OpCase> cases;
  auto add = [&](std::string name, std::vector<InputSpec> inputs, std::function<Outputs(const Inputs&)> run,
                 std::function<RefOutputs(const RefInputs&)> reference, std::vector<DType> dtypes) {
    cases.push_back({.name = std::move(name),
                     .inputs = std::move(inputs),
                     .run = std::move(run),
                     .reference = std::move(reference),
                     .dtypes = std::move(dtypes),
                     .cpu_tolerance = cpu_tol,
                     .cuda_tolerance = cuda_tol});
  };

  add("sdpa_backward_cross_lq_ne_lk", qkvo({2, 3, 5, 8}, {2, 3, 7, 8}, {2, 3, 7, 8}),
      [](const Inputs& x) { return run_both(x, {}, std::nullopt, false); },
      [](const RefInputs& x) {
        return ref_attention_grads(x[0], x[1], x[2], x[3], nullptr, RefMask::None, 1 / std::sqrt(8.0), false);
      },
      floats);
  add("sdpa_backward_value_dim_differs_custom_scale", qkvo({2, 2, 6, 16}, {2, 2, 9, 16}, {2, 2, 9, 8}),
      [](const Inputs& x) { return run_both(x, {}, 0.3, false); },
      [](const RefInputs& x) { return ref_attention_grads(x[0], x[1], x[2], x[3], nullptr, RefMask::None, 0.3, false); },
      floats);
  add("sdpa_backward_odd_dims", qkvo({2, 3, 5, 4}, {2, 3, 7, 4}, {2, 3, 7, 6}),
      [](const Inputs& x) { return run_both(x, {}, std::nullopt, false); },
      [](const RefInputs& x) {
        return ref_attention_grads(x[0], x[1], x[2], x[3], nullptr, RefMask::None, 0.5, false);
      },
      floats);
  add("sdpa_backward_causal", qkvo({1, 2, 9, 16}, {1, 2, 9, 16}, {1, 2, 9, 16}),
      [](const Inputs& x) { return run_both(x, {}, std::nullopt, true); },
      [](const RefInputs& x) { return ref_attention_grads(x[0], x[1], x[2], x[3], nullptr, RefMask::None, 0.25, true); },
      floats);
  add("sdpa_backward_causal_fewer_queries_than_keys", qkvo({2, 1, 4, 8}, {2, 1, 11, 8}, {2, 1, 11, 8}),
      [](const Inputs& x) { return run_both(x, {}, std::nullopt, true); },
      [](const RefInputs& x) {
        return ref_attention_grads(x[0], x[1], x[2], x[3], nullptr, RefMask::None, 1 / std::sqrt(8.0), true);
      },
      floats);
  add("sdpa_backward_causal_more_queries_than_keys", qkvo({1, 2, 11, 8}, {1, 2, 4, 8}, {1, 2, 4, 8}),
      [](const Inputs& x) { return run_both(x, {}, std::nullopt, true); },
      [](const RefInputs& x) {
        return ref_attention_grads(x[0], x[1], x[2], x[3], nullptr, RefMask::None, 1 / std::sqrt(8.0), true);
      },
      floats);
  {
    auto inputs = qkvo({2, 3, 5, 4}, {2, 3, 7, 4}, {2, 3, 7, 6});
    inputs.push_back(keep_mask({2, 1, 5, 7}));
    add("sdpa_backward_keep_mask_u8_broadcast_heads", inputs,
        [](const Inputs& x) { return run_both(x, x[4], std::nullopt, false); },
        [](const RefInputs& x) {
          return ref_attention_grads(x[0], x[1], x[2], x[3], &x[4], RefMask::Keep, 0.5, false);
        },
        floats);
  }
  {
    auto inputs = qkvo({1, 2, 7, 8}, {1, 2, 7, 8}, {1, 2, 7, 8});
    inputs.push_back({.shape = {7, 7}, .low = -3, .high = 1});
    add("sdpa_backward_additive_mask_2d_and_causal", inputs,
        [](const Inputs& x) { return run_both(x, x[4], std::nullopt, true); },
        [](const RefInputs& x) {
          return ref_attention_grads(x[0], x[1], x[2], x[3], &x[4], RefMask::Additive, 1 / std::sqrt(8.0), true);
        },
        floats);
  }
  {  // Query row 2 keeps no key: zero grad_q row, no contribution to grad_k / grad_v, no NaN.
    auto inputs = qkvo({2, 2, 5, 8}, {2, 2, 6, 8}, {2, 2, 6, 8});
    inputs.push_back(keep_mask({5, 6}));
    add("sdpa_backward_fully_masked_row_u8", inputs,
        [](const Inputs& x) { return run_both(x, with_row(x[4], 2, 0.0), std::nullopt, false); },
        [](const RefInputs& x) {
          RefTensor mask = with_row(x[4], 2, 0.0);
          return ref_attention_grads(x[0], x[1], x[2], x[3], &mask, RefMask::Keep, 1 / std::sqrt(8.0), false);
        },
        floats);
  }
  {
    auto inputs = qkvo({1, 2, 5, 8}, {1, 2, 6, 8}, {1, 2, 6, 8});
    inputs.push_back({.shape = {5, 6}, .low = -2, .high = 2});
    const double minus_inf = -std::numeric_limits<double>::infinity();
    add("sdpa_backward_fully_masked_row_additive", inputs,
        [=](const Inputs& x) { return run_both(x, with_row(x[4], 0, minus_inf), std::nullopt, false); },
        [=](const RefInputs& x) {
          RefTensor mask = with_row(x[4], 0, minus_inf);
          return ref_attention_grads(x[0], x[1], x[2], x[3], &mask, RefMask::Additive, 1 / std::sqrt(8.0), false);
        },
        floats);
  }
  {
    auto inputs = qkvo({2, 2, 5, 8}, {2, 2, 6, 8}, {2, 2, 6, 8});
    for (InputSpec& spec : inputs) spec.non_contiguous = true;
    add("sdpa_backward_noncontiguous_inputs", inputs,
        [](const Inputs& x) { return run_both(x, {}, std::nullopt, false); },
        [](const RefInputs& x) {
          return ref_attention_grads(x[0], x[1], x[2], x[3], nullptr, RefMask::None, 1 / std::sqrt(8.0), false);
        },
        floats);
  }
  // Several query blocks (64 rows on the CPU, 8 per CUDA block) and 32-row tiles; head dim 64.
  add("sdpa_backward_multi_block_causal", qkvo({1, 2, 130, 64}, {1, 2, 130, 64}, {1, 2, 130, 64}),
      [](const Inputs& x) { return run_both(x, {}, std::nullopt, true); },
      [](const RefInputs& x) {
        return ref_attention_grads(x[0], x[1], x[2], x[3], nullptr, RefMask::None, 0.125, true);
      },
      {DType::F32, DType::BF16, DType::F16});
  add("sdpa_backward_head_dim_128", qkvo({1, 2, 40, 128}, {1, 2, 70, 128}, {1, 2, 70, 128}),
      [](const Inputs& x) { return run_both(x, {}, std::nullopt, false); },
      [](const RefInputs& x) {
        return ref_attention_grads(x[0], x[1], x[2], x[3], nullptr, RefMask::None, 1 / std::sqrt(128.0), false);
      },
      {DType::F32, DType::BF16, DType::F16});
  return cases;
}
WICK_REGISTER_OP_CASES(attention_backward_cases);

}  // namespace
}  // namespace wick::testing
