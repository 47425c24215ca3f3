// Gradient-check entries for the elementwise family (engine/autograd/ops_elementwise.h).
#include "engine/autograd/ops_elementwise.h"
#include "tests/engine/gradcheck.h"

namespace wick::testing {
namespace {

using Inputs = std::vector<Tensor>;
using Outputs = std::vector<Tensor>;

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
      {.name = "exp", .inputs = {{.shape = {7}}}, .fn = [](const Inputs& x) { return Outputs{autograd::exp(x[0])}; }},
      {.name = "operators", .inputs = {{.shape = {2, 3}}, {.shape = {3}, .low = 0.5, .high = 2.0}},
       .fn = [](const Inputs& x) { return Outputs{(x[0] * 2.0 + x[1]) / x[1] - 1.0 - x[0] * x[0]}; }},
      {.name = "reused_input", .inputs = {{.shape = {4}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::mul(autograd::exp(x[0]), x[0])}; }},
      {.name = "constant_operand", .inputs = {{.shape = {3}}, {.shape = {3}, .differentiable = false}},
       .fn = [](const Inputs& x) { return Outputs{autograd::mul(x[0], x[1])}; }},
  };
}
WICK_REGISTER_GRAD_CASES(elementwise_grad_cases);

}  // namespace
}  // namespace wick::testing
