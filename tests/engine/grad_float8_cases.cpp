// Gradient-check entries for float8_linear (engine/autograd/ops_float8.h): the input's and bias's
// gradients through a weight of e4m3 codes (a constant) with per-row or per-tensor scales.
#include "engine/autograd/ops_float8.h"
#include "tests/engine/gradcheck.h"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace wick::testing {
namespace {

using Inputs = std::vector<Tensor>;
using Outputs = std::vector<Tensor>;

// Codes drawn from [0, 127) (finite, non-negative values up to 448) and [128, 255) is not needed:
// the sign does not change the rule.
GradCase float8_case(std::string name, Shape x, int64_t out, int64_t scales, bool with_bias) {
  const int64_t in = x.back();
  GradCase c{.name = std::move(name),
             .inputs = {{.shape = std::move(x)},
                        {.shape = {out, in}, .low = 0, .high = 127, .differentiable = false, .integer = true,
                         .dtype = DType::U8},
                        {.shape = {scales}, .low = 0.001, .high = 0.01, .differentiable = false, .dtype = DType::F32}}};
  if (with_bias) c.inputs.push_back({.shape = {out}});
  c.fn = [](const Inputs& v) {
    // The half-precision runs hand every floating input over in bf16 / f16; scales are f32.
    return Outputs{autograd::float8_linear(v[0], v[1], v[2].to(DType::F32), v.size() > 3 ? v[3] : Tensor())};
  };
  return c;
}

std::vector<GradCase> float8_grad_cases() {
  return {float8_case("float8_linear_per_row_bias", {3, 4}, 5, 5, true),
          float8_case("float8_linear_per_tensor", {2, 3, 6}, 4, 1, false),
          float8_case("float8_linear_1d_input", {6}, 3, 3, true)};
}
WICK_REGISTER_GRAD_CASES(float8_grad_cases);

}  // namespace
}  // namespace wick::testing
