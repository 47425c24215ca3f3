// Gradient-check entries for the softmax family (engine/autograd/ops_softmax.h): softmax and
// log-softmax along each axis.
#include "engine/autograd/ops_softmax.h"
#include "tests/engine/gradcheck.h"

namespace wick::testing {
namespace {

using Inputs = std::vector<Tensor>;
using Outputs = std::vector<Tensor>;

std::vector<GradCase> softmax_grad_cases() {
  return {
      {.name = "softmax_last", .inputs = {{.shape = {3, 5}, .low = -2.0, .high = 2.0}},
       .fn = [](const Inputs& x) { return Outputs{autograd::softmax(x[0], -1)}; }},
      {.name = "softmax_middle", .inputs = {{.shape = {2, 4, 3}, .low = -2.0, .high = 2.0}},
       .fn = [](const Inputs& x) { return Outputs{autograd::softmax(x[0], 1)}; }},
      {.name = "log_softmax", .inputs = {{.shape = {2, 4, 3}, .low = -2.0, .high = 2.0}},
       .fn = [](const Inputs& x) { return Outputs{autograd::log_softmax(x[0], 0), autograd::log_softmax(x[0], -1)}; }},
  };
}
WICK_REGISTER_GRAD_CASES(softmax_grad_cases);

}  // namespace
}  // namespace wick::testing
