// Gradient-check entries for the elementwise family (engine/autograd/ops_elementwise.h).
// Inputs avoid the non-differentiable points (abs and relu at 0, ties of maximum/minimum): the
// uniform draws never land within eps of them; the tie rules are value-tested in
// elementwise_autograd_test.cpp.
#include "engine/autograd/ops_elementwise.h"
#include "tests/engine/gradcheck.h"

namespace wick::testing {
namespace {

using Inputs = std::vector<Tensor>;
using Outputs = std::vector<Tensor>;

// One unary op on a [3, 5] input drawn from [low, high).
GradCase unary_case(const std::string& name, Tensor (*op)(const Tensor&), double low = -1.0, double high = 1.0) {
  return {.name = name, .inputs = {{.shape = {3, 5}, .low = low, .high = high}},
          .fn = [op](const Inputs& x) { return Outputs{op(x[0])}; }};
}

std::vector<GradCase> elementwise_grad_cases() {
  return {
      {.name = "add_broadcast", .inputs = {{.shape = {3, 1, 4}}, {.shape = {5, 1}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::add(x[0], x[1])}; }},
      {.name = "sub_broadcast", .inputs = {{.shape = {2, 3}}, {.shape = {3}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::sub(x[0], x[1])}; }},
      {.name = "mul_broadcast", .inputs = {{.shape = {4, 3}}, {.shape = {4, 1}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::mul(x[0], x[1])}; }},
      {.name = "div", .inputs = {{.shape = {3, 4}}, {.shape = {3, 4}, .low = 0.5, .high = 2.0}},
       .fn = [](const Inputs& x) { return Outputs{autograd::div(x[0], x[1])}; }},
      {.name = "div_broadcast", .inputs = {{.shape = {1, 4}}, {.shape = {3, 1}, .low = 0.5, .high = 2.0}},
       .fn = [](const Inputs& x) { return Outputs{autograd::div(x[0], x[1])}; }},
      {.name = "exp", .inputs = {{.shape = {7}}}, .fn = [](const Inputs& x) { return Outputs{autograd::exp(x[0])}; }},
      {.name = "operators", .inputs = {{.shape = {2, 3}}, {.shape = {3}, .low = 0.5, .high = 2.0}},
       .fn = [](const Inputs& x) { return Outputs{(x[0] * 2.0 + x[1]) / x[1] - 1.0 - x[0] * x[0]}; }},
      {.name = "operators_scalar_first", .inputs = {{.shape = {2, 3}, .low = 0.5, .high = 2.0}},
       .fn = [](const Inputs& x) { return Outputs{-x[0] + (3.0 - x[0]) * (2.0 / x[0]) + (1.0 + x[0]) / 4.0}; }},
      {.name = "reused_input", .inputs = {{.shape = {4}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::mul(autograd::exp(x[0]), x[0])}; }},
      {.name = "constant_operand", .inputs = {{.shape = {3}}, {.shape = {3}, .differentiable = false}},
       .fn = [](const Inputs& x) { return Outputs{autograd::mul(x[0], x[1])}; }},

      // ---- unary ----
      unary_case("neg", autograd::neg),
      unary_case("abs", autograd::abs),
      unary_case("log", autograd::log, 0.3, 2.0),
      unary_case("sqrt", autograd::sqrt, 0.3, 2.0),
      unary_case("rsqrt", autograd::rsqrt, 0.3, 2.0),
      unary_case("square", autograd::square),
      unary_case("sin", autograd::sin, -3.0, 3.0),
      unary_case("cos", autograd::cos, -3.0, 3.0),
      unary_case("tanh", autograd::tanh, -2.0, 2.0),
      unary_case("sigmoid", autograd::sigmoid, -4.0, 4.0),
      unary_case("relu", autograd::relu),
      unary_case("silu", autograd::silu, -4.0, 4.0),
      unary_case("gelu", autograd::gelu, -4.0, 4.0),
      unary_case("gelu_tanh", autograd::gelu_tanh, -4.0, 4.0),
      {.name = "unary_chain", .inputs = {{.shape = {2, 4}, .low = 0.2, .high = 1.5}},
       .fn = [](const Inputs& x) {
         return Outputs{autograd::tanh(autograd::log(autograd::sqrt(autograd::square(autograd::sigmoid(x[0])))))};
       }},

      // ---- pow ----
      {.name = "pow_tensor_broadcast", .inputs = {{.shape = {3, 4}, .low = 0.5, .high = 2.0},
                                                 {.shape = {4}, .low = -1.5, .high = 1.5}},
       .fn = [](const Inputs& x) { return Outputs{autograd::pow(x[0], x[1])}; }},
      {.name = "pow_constant_exponent", .inputs = {{.shape = {5}, .low = 0.5, .high = 2.0},
                                                  {.shape = {5}, .low = -2.0, .high = 2.0, .differentiable = false}},
       .fn = [](const Inputs& x) { return Outputs{autograd::pow(x[0], x[1])}; }},
      {.name = "pow_scalar_exponent", .inputs = {{.shape = {2, 3}, .low = 0.5, .high = 2.0}},
       .fn = [](const Inputs& x) { return Outputs{autograd::pow(x[0], 2.5)}; }},
      {.name = "pow_integer_exponent_negative_base", .inputs = {{.shape = {6}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::pow(x[0], 3.0)}; }},
      {.name = "pow_zero_exponent", .inputs = {{.shape = {4}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::add(autograd::pow(x[0], 0.0), x[0])}; }},
      {.name = "pow_scalar_base", .inputs = {{.shape = {2, 3}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::pow(2.5, x[0])}; }},

      // ---- scalar variants ----
      {.name = "sub_scalar", .inputs = {{.shape = {4}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::sub(x[0], 0.5), autograd::sub(0.5, x[0])}; }},
      {.name = "div_scalar", .inputs = {{.shape = {4}, .low = 0.5, .high = 2.0}},
       .fn = [](const Inputs& x) { return Outputs{autograd::div(x[0], 3.0), autograd::div(-2.0, x[0])}; }},
      {.name = "maximum_minimum_scalar", .inputs = {{.shape = {3, 4}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::maximum(x[0], 0.1), autograd::minimum(x[0], -0.2)}; }},

      // ---- maximum / minimum (distinct random values) ----
      {.name = "maximum_broadcast", .inputs = {{.shape = {3, 4}}, {.shape = {4}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::maximum(x[0], x[1])}; }},
      {.name = "minimum_broadcast", .inputs = {{.shape = {2, 1, 3}}, {.shape = {4, 1}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::minimum(x[0], x[1])}; }},

      // ---- where: the u8 condition is a constant input; both branches and broadcasting ----
      {.name = "where_broadcast",
       .inputs = {{.shape = {3, 4}, .low = 0, .high = 2, .differentiable = false, .integer = true,
                   .dtype = DType::U8},
                  {.shape = {3, 4}}, {.shape = {4}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::where(x[0], x[1], x[2])}; }},
      {.name = "where_computed_condition", .inputs = {{.shape = {5}}, {.shape = {5}}},
       .fn = [](const Inputs& x) {
         return Outputs{autograd::where(autograd::gt(x[0], x[1]), autograd::square(x[0]), autograd::exp(x[1]))};
       }},
  };
}
WICK_REGISTER_GRAD_CASES(elementwise_grad_cases);

}  // namespace
}  // namespace wick::testing
