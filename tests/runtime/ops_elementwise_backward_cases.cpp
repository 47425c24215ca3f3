// Op-harness entries for the activation backward kernels (runtime/ops/elementwise.h):
// grad * f'(x) against float64 closed forms, contiguous, strided and large (threaded) inputs.
#include <cmath>

#include "runtime/ops/elementwise.h"
#include "tests/runtime/op_harness.h"

namespace wick::testing {
namespace {

double ref_sigmoid(double v) { return 1 / (1 + std::exp(-v)); }
double ref_silu_derivative(double v) { return ref_sigmoid(v) * (1 + v * (1 - ref_sigmoid(v))); }
double ref_gelu_derivative(double v) {
  return 0.5 * (1 + std::erf(v / std::sqrt(2.0))) + v * std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI);
}
// Differentiated by hand: y = 0.5 v (1 + tanh(u)), u = k (v + a v^3).
double ref_gelu_tanh_derivative(double v) {
  const double k = std::sqrt(2 / M_PI), a = 0.044715;
  double u = k * (v + a * v * v * v), t = std::tanh(u);
  return 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * k * (1 + 3 * a * v * v);
}

OpCase backward_case(const std::string& name, Tensor (*op)(const Tensor&, const Tensor&), double (*derivative)(double),
                     Shape shape, bool non_contiguous = false) {
  return {.name = name,
          .inputs = {{.shape = shape, .low = -2.0, .high = 2.0, .non_contiguous = non_contiguous},
                     {.shape = shape, .low = -4.0, .high = 4.0, .non_contiguous = non_contiguous}},
          .run = [op](const Inputs& x) { return Outputs{op(x[0], x[1])}; },
          .reference =
              [derivative](const RefInputs& x) {
                return RefOutputs{zip(x[0], x[1], [derivative](double g, double v) { return g * derivative(v); })};
              },
          .dtypes = {DType::F32, DType::F64, DType::BF16, DType::F16}};
}

std::vector<OpCase> elementwise_backward_cases() {
  return {
      backward_case("silu_backward", silu_backward, ref_silu_derivative, {3, 7}),
      backward_case("gelu_backward", gelu_backward, ref_gelu_derivative, {33}),
      backward_case("gelu_tanh_backward", gelu_tanh_backward, ref_gelu_tanh_derivative, {5, 4}),
      backward_case("gelu_backward_strided", gelu_backward, ref_gelu_derivative, {4, 6}, true),
      backward_case("silu_backward_large", silu_backward, ref_silu_derivative, {40000}),
      // Past the parallel grain and not a multiple of 16: the AVX-512 loop (where the CPU has it) and its tail.
      backward_case("gelu_tanh_backward_large", gelu_tanh_backward, ref_gelu_tanh_derivative, {40007}),
  };
}
WICK_REGISTER_OP_CASES(elementwise_backward_cases);

}  // namespace
}  // namespace wick::testing
