// Gradient-check entries for the adaLN operations (engine/autograd/ops_modulate.h): modulate and the
// gated residual, every operand differentiable or constant, and one long token axis.
#include "engine/autograd/ops_modulate.h"
#include "tests/engine/gradcheck.h"

namespace wick::testing {
namespace {

using Inputs = std::vector<Tensor>;
using Outputs = std::vector<Tensor>;

std::vector<GradCase> modulate_grad_cases() {
  return {
      {.name = "modulate", .inputs = {{.shape = {2, 3, 4}}, {.shape = {2, 4}}, {.shape = {2, 4}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::modulate(x[0], x[1], x[2])}; }},
      {.name = "modulate_constant_x", .inputs = {{.shape = {3, 5, 2}, .differentiable = false}, {.shape = {3, 2}},
                                                 {.shape = {3, 2}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::modulate(x[0], x[1], x[2])}; }},
      {.name = "modulate_constant_shift_scale",
       .inputs = {{.shape = {1, 7, 3}}, {.shape = {1, 3}, .differentiable = false},
                  {.shape = {1, 3}, .differentiable = false}},
       .fn = [](const Inputs& x) { return Outputs{autograd::modulate(x[0], x[1], x[2])}; }},
      {.name = "gated_residual", .inputs = {{.shape = {2, 3, 4}}, {.shape = {2, 4}}, {.shape = {2, 3, 4}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::gated_residual(x[0], x[1], x[2])}; }},
      {.name = "gated_residual_constant_gate",
       .inputs = {{.shape = {2, 33, 3}}, {.shape = {2, 3}, .differentiable = false}, {.shape = {2, 33, 3}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::gated_residual(x[0], x[1], x[2])}; }},
      {.name = "gated_residual_reused_input", .inputs = {{.shape = {2, 4, 3}}, {.shape = {2, 3}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::gated_residual(x[0], x[1], x[0])}; }},
  };
}
WICK_REGISTER_GRAD_CASES(modulate_grad_cases);

}  // namespace
}  // namespace wick::testing
