// Gradient-check entries for matmul and linear (engine/autograd/ops_matmul.h).
#include "engine/autograd/ops_matmul.h"
#include "tests/engine/gradcheck.h"

namespace wick::testing {
namespace {

using Inputs = std::vector<Tensor>;
using Outputs = std::vector<Tensor>;

GradCase matmul_case(std::string name, Shape a, Shape b, bool transpose_a = false, bool transpose_b = false) {
  return {.name = std::move(name), .inputs = {{.shape = std::move(a)}, {.shape = std::move(b)}},
          .fn = [=](const Inputs& x) { return Outputs{autograd::matmul(x[0], x[1], transpose_a, transpose_b)}; }};
}

std::vector<GradCase> matmul_grad_cases() {
  return {
      matmul_case("matmul_square", {4, 4}, {4, 4}),
      matmul_case("matmul_rectangular", {3, 5}, {5, 2}),
      matmul_case("matmul_batched_broadcast", {2, 1, 3, 4}, {3, 4, 5}),
      matmul_case("matmul_shared_right_matrix", {2, 3, 4}, {4, 5}),
      matmul_case("matmul_shared_left_matrix", {3, 4}, {2, 4, 5}),
      matmul_case("matmul_vector_matrix", {4}, {4, 3}),
      matmul_case("matmul_batched_matrix_vector", {2, 3, 4}, {4}),
      matmul_case("matmul_vector_batched", {4}, {2, 4, 3}),
      matmul_case("matmul_dot", {5}, {5}),
      matmul_case("matmul_transposed_both", {4, 3}, {5, 4}, true, true),
      matmul_case("matmul_transposed_batched_broadcast", {2, 1, 4, 3}, {3, 5, 4}, true, true),
      matmul_case("matmul_transposed_b_shared", {2, 3, 4}, {5, 4}, false, true),
      {.name = "linear_bias", .inputs = {{.shape = {3, 4}}, {.shape = {5, 4}}, {.shape = {5}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::linear(x[0], x[1], x[2])}; }},
      {.name = "linear_no_bias", .inputs = {{.shape = {3, 4}}, {.shape = {2, 4}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::linear(x[0], x[1])}; }},
      {.name = "linear_3d_input", .inputs = {{.shape = {2, 3, 4}}, {.shape = {5, 4}}, {.shape = {5}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::linear(x[0], x[1], x[2])}; }},
      {.name = "linear_1d_input", .inputs = {{.shape = {4}}, {.shape = {3, 4}}, {.shape = {3}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::linear(x[0], x[1], x[2])}; }},
      {.name = "linear_constant_weight", .inputs = {{.shape = {3, 4}}, {.shape = {2, 4}, .differentiable = false}},
       .fn = [](const Inputs& x) { return Outputs{autograd::linear(x[0], x[1])}; }},
  };
}
WICK_REGISTER_GRAD_CASES(matmul_grad_cases);

}  // namespace
}  // namespace wick::testing
