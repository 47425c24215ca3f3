// Gradient-check entries for engine/autograd/ops_attention.h: finite differences through the whole
// forward (q, k, v perturbed one element at a time) against the runtime backward.
#include "engine/autograd/ops_attention.h"
#include "tests/engine/gradcheck.h"

// GradInput::dtype (a std::optional without a default member initializer) makes GCC flag every
// designated initializer that leaves it out; leaving it out is the intended use.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace wick::testing {
namespace {

using Inputs = std::vector<Tensor>;
using Outputs = std::vector<Tensor>;

// B=2, H=3, Lq=5, Lk=7, D=4, Dv=6.
std::vector<GradInput> qkv() { return {{.shape = {2, 3, 5, 4}}, {.shape = {2, 3, 7, 4}}, {.shape = {2, 3, 7, 6}}}; }
std::vector<GradInput> with(std::vector<GradInput> inputs, GradInput extra) {
  inputs.push_back(std::move(extra));
  return inputs;
}

std::vector<GradCase> attention_grad_cases() {
  return {
      {.name = "sdpa_odd_sizes", .inputs = qkv(),
       .fn = [](const Inputs& x) { return Outputs{autograd::scaled_dot_product_attention(x[0], x[1], x[2])}; }},
      {.name = "sdpa_causal", .inputs = qkv(),
       .fn =
           [](const Inputs& x) {
             return Outputs{autograd::scaled_dot_product_attention(x[0], x[1], x[2], {}, std::nullopt, true)};
           }},
      {.name = "sdpa_causal_more_queries_than_keys",
       .inputs = {{.shape = {1, 2, 7, 4}}, {.shape = {1, 2, 3, 4}}, {.shape = {1, 2, 3, 5}}},
       .fn =
           [](const Inputs& x) {
             return Outputs{autograd::scaled_dot_product_attention(x[0], x[1], x[2], {}, 0.7, true)};
           }},
      {.name = "sdpa_keep_mask_u8",
       .inputs = with(qkv(), {.shape = {2, 1, 5, 7}, .low = 0, .high = 2, .differentiable = false, .integer = true,
                              .dtype = DType::U8}),
       .fn = [](const Inputs& x) { return Outputs{autograd::scaled_dot_product_attention(x[0], x[1], x[2], x[3])}; }},
      {.name = "sdpa_additive_mask_and_causal",
       .inputs = with(qkv(), {.shape = {5, 7}, .low = -2, .high = 1, .differentiable = false}),
       .fn =
           [](const Inputs& x) {
             return Outputs{autograd::scaled_dot_product_attention(x[0], x[1], x[2], x[3], 0.8, true)};
           }},
      {.name = "sdpa_constant_key",  // only q and v require grad
       .inputs = {{.shape = {2, 3, 5, 4}}, {.shape = {2, 3, 7, 4}, .differentiable = false}, {.shape = {2, 3, 7, 6}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::scaled_dot_product_attention(x[0], x[1], x[2])}; }},
      {.name = "sdpa_reused_input",  // self-attention: q = k = v = x, gradients from three uses summed
       .inputs = {{.shape = {1, 2, 6, 4}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::scaled_dot_product_attention(x[0], x[0], x[0])}; }},
  };
}
WICK_REGISTER_GRAD_CASES(attention_grad_cases);

}  // namespace
}  // namespace wick::testing
