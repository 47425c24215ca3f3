// Gradient-check entries for the reduction family (engine/autograd/ops_reduce.h): all axes,
// several axes, negative axes, keepdim. max/min use distinct random values (no ties); the tie rule
// is value-tested in elementwise_autograd_test.cpp.
#include "engine/autograd/ops_elementwise.h"
#include "engine/autograd/ops_reduce.h"
#include "tests/engine/gradcheck.h"

namespace wick::testing {
namespace {

using Inputs = std::vector<Tensor>;
using Outputs = std::vector<Tensor>;

std::vector<GradCase> reduce_grad_cases() {
  return {
      {.name = "sum_all", .inputs = {{.shape = {3, 4}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::sum(x[0])}; }},
      {.name = "sum_axes_keepdim", .inputs = {{.shape = {2, 3, 4}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::sum(x[0], {0, 2}, true), autograd::sum(x[0], {-1})}; }},
      {.name = "mean_all", .inputs = {{.shape = {5, 3}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::mean(x[0])}; }},
      {.name = "mean_axes", .inputs = {{.shape = {2, 3, 4}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::mean(x[0], {-1, 0}), autograd::mean(x[0], {1}, true)}; }},
      {.name = "max_axis", .inputs = {{.shape = {3, 5}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::max(x[0], {1}), autograd::max(x[0], {0}, true)}; }},
      {.name = "max_all", .inputs = {{.shape = {2, 3, 2}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::max(x[0])}; }},
      {.name = "min_axes", .inputs = {{.shape = {2, 3, 4}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::min(x[0], {0, -1}), autograd::min(x[0])}; }},
      {.name = "var_unbiased", .inputs = {{.shape = {3, 6}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::var(x[0], {1}), autograd::var(x[0])}; }},
      {.name = "var_population_keepdim", .inputs = {{.shape = {2, 3, 4}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::var(x[0], {0, 2}, true, 0.0)}; }},
      {.name = "logsumexp", .inputs = {{.shape = {3, 4}, .low = -3.0, .high = 3.0}},
       .fn = [](const Inputs& x) {
         return Outputs{autograd::logsumexp(x[0], {1}), autograd::logsumexp(x[0]),
                        autograd::logsumexp(x[0], {0}, true)};
       }},
      {.name = "mean_of_product", .inputs = {{.shape = {3, 4}}, {.shape = {4}}},
       .fn = [](const Inputs& x) { return Outputs{autograd::mean(autograd::mul(x[0], x[1]), {0})}; }},
  };
}
WICK_REGISTER_GRAD_CASES(reduce_grad_cases);

}  // namespace
}  // namespace wick::testing
