// Gradient-check entries for matmul, linear and conv2d (engine/autograd/ops_linalg.h).
#include <array>

#include "engine/autograd/ops_linalg.h"
#include "tests/engine/gradcheck.h"

namespace wick::testing {
namespace {

using Inputs = std::vector<Tensor>;
using Outputs = std::vector<Tensor>;

GradCase matmul_case(std::string name, Shape a, Shape b, bool transpose_a = false, bool transpose_b = false) {
  return {.name = std::move(name), .inputs = {{.shape = std::move(a)}, {.shape = std::move(b)}},
          .fn = [=](const Inputs& x) { return Outputs{autograd::matmul(x[0], x[1], transpose_a, transpose_b)}; }};
}

struct ConvParams {
  std::array<int64_t, 2> stride = {1, 1}, padding = {0, 0}, dilation = {1, 1};
  int64_t groups = 1;
};

GradCase conv_case(std::string name, Shape x, Shape w, bool with_bias, ConvParams p) {
  GradCase c;
  c.name = std::move(name);
  c.inputs = {{.shape = std::move(x)}, {.shape = w}};
  if (with_bias) c.inputs.push_back({.shape = {w[0]}});
  c.fn = [=](const Inputs& in) {
    Tensor bias = in.size() > 2 ? in[2] : Tensor();
    return Outputs{autograd::conv2d(in[0], in[1], bias, p.stride, p.padding, p.dilation, p.groups)};
  };
  return c;
}

std::vector<GradCase> linalg_grad_cases() {
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
      conv_case("conv2d_3x3_bias", {2, 3, 6, 6}, {4, 3, 3, 3}, true, {}),
      conv_case("conv2d_3x3_no_bias", {1, 2, 5, 6}, {3, 2, 3, 3}, false, {}),
      conv_case("conv2d_stride2_padding", {2, 2, 7, 6}, {3, 2, 3, 3}, true, {.stride = {2, 2}, .padding = {1, 1}}),
      conv_case("conv2d_dilation2", {1, 2, 8, 7}, {2, 2, 3, 3}, true, {.padding = {2, 1}, .dilation = {2, 2}}),
      conv_case("conv2d_groups2", {2, 4, 5, 5}, {6, 2, 3, 3}, true, {.padding = {1, 1}, .groups = 2}),
      conv_case("conv2d_depthwise", {2, 3, 6, 5}, {3, 1, 3, 3}, false, {.stride = {1, 2}, .padding = {1, 1}, .groups = 3}),
      conv_case("conv2d_pointwise", {2, 4, 3, 3}, {5, 4, 1, 1}, true, {}),
      conv_case("conv2d_asymmetric", {1, 2, 9, 8}, {2, 2, 2, 3}, false, {.stride = {3, 2}, .padding = {0, 1}}),
  };
}
WICK_REGISTER_GRAD_CASES(linalg_grad_cases);

}  // namespace
}  // namespace wick::testing
