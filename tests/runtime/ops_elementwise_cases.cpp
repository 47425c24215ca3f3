// Op-harness entries for the elementwise ops (runtime/ops/elementwise.h). References are naive
// float64 code written here, independent of wick.
#include <cmath>

#include "runtime/ops/elementwise.h"
#include "tests/runtime/op_harness.h"

// InputSpec::dtype (a std::optional without a default member initializer) makes GCC flag every
// designated initializer that leaves it out; leaving it out is the intended use.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace wick::testing {
namespace {

const std::vector<DType> floats = {DType::F32, DType::BF16, DType::F16, DType::F64};
const std::vector<DType> ints = {DType::I32, DType::I64, DType::I8};

double sigmoid_ref(double v) { return 1.0 / (1.0 + std::exp(-v)); }
double gelu_ref(double v) { return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); }
double gelu_tanh_ref(double v) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * v * (1.0 + std::tanh(k * (v + 0.044715 * v * v * v)));
}

// Integer dtypes draw whole numbers.
OpCase unary_case(std::string name, Tensor (*op)(const Tensor&), double (*ref)(double), Shape shape, double low,
                  double high, bool non_contiguous = false, std::vector<DType> dtypes = floats) {
  bool integer = is_integral(dtypes.front());
  return {.name = std::move(name),
          .inputs = {{.shape = std::move(shape), .low = low, .high = high, .integer = integer,
                      .non_contiguous = non_contiguous}},
          .run = [op](const Inputs& x) { return Outputs{op(x[0])}; },
          .reference = [ref](const RefInputs& x) { return RefOutputs{map(x[0], ref)}; },
          .dtypes = std::move(dtypes)};
}

std::vector<OpCase> unary_cases() {
  return {
      unary_case("neg", neg, [](double v) { return -v; }, {3, 5}, -3, 3),
      unary_case("abs", abs, [](double v) { return std::fabs(v); }, {7}, -3, 3),
      unary_case("abs_int", abs, [](double v) { return std::fabs(v); }, {7}, -100, 100, false, ints),
      unary_case("neg_int", neg, [](double v) { return -v; }, {2, 9}, -50, 50, true, ints),
      unary_case("exp", exp, [](double v) { return std::exp(v); }, {3, 5}, -3, 3),
      unary_case("log", log, [](double v) { return std::log(v); }, {4, 6}, 0.05, 5),
      unary_case("sqrt", sqrt, [](double v) { return std::sqrt(v); }, {33}, 0.0, 9),
      unary_case("rsqrt", rsqrt, [](double v) { return 1.0 / std::sqrt(v); }, {2, 3, 4}, 0.1, 9, true),
      unary_case("square", square, [](double v) { return v * v; }, {5, 2}, -10, 10, true),
      unary_case("square_int", square, [](double v) { return v * v; }, {5, 2}, -11, 11, true, ints),
      unary_case("sin", sin, [](double v) { return std::sin(v); }, {1}, -3, 3),
      unary_case("cos", cos, [](double v) { return std::cos(v); }, {3, 7}, -3, 3, true),
      unary_case("tanh", tanh, [](double v) { return std::tanh(v); }, {3, 7}, -4, 4),
      unary_case("sigmoid", sigmoid, sigmoid_ref, {6, 6}, -8, 8),
      unary_case("relu", relu, [](double v) { return v < 0 ? 0.0 : v; }, {4, 5}, -5, 5, true),
      unary_case("relu_int", relu, [](double v) { return v < 0 ? 0.0 : v; }, {4, 5}, -50, 50, true, ints),
      unary_case("silu", silu, [](double v) { return v * sigmoid_ref(v); }, {4, 9}, -6, 6),
      unary_case("gelu", gelu, gelu_ref, {4, 9}, -5, 5),
      unary_case("gelu_tanh", gelu_tanh, gelu_tanh_ref, {4, 9}, -5, 5),
      // Past the OpenMP grain (32768 elements), contiguous and strided.
      unary_case("gelu_tanh_large", gelu_tanh, gelu_tanh_ref, {40000}, -5, 5),
      unary_case("gelu_tanh_odd", gelu_tanh, gelu_tanh_ref, {40007}, -9, 9),
      unary_case("silu_large_strided", silu, [](double v) { return v * sigmoid_ref(v); }, {200, 170}, -6, 6, true),
  };
}

// A binary entry: a and b specs, the op, and its float64 reference.
OpCase binary_case(std::string name, Tensor (*op)(const Tensor&, const Tensor&), double (*ref)(double, double),
                   InputSpec a, InputSpec b, std::vector<DType> dtypes = floats, bool exact = false) {
  return {.name = std::move(name),
          .inputs = {std::move(a), std::move(b)},
          .run = [op](const Inputs& x) { return Outputs{op(x[0], x[1])}; },
          .reference = [ref](const RefInputs& x) { return RefOutputs{zip(x[0], x[1], ref)}; },
          .dtypes = std::move(dtypes),
          .exact = exact};
}

double int_div_ref(double a, double b) { return b == 0 ? 0.0 : std::trunc(a / b); }

std::vector<OpCase> binary_cases() {
  const std::vector<DType> all = {DType::F32, DType::BF16, DType::F16, DType::F64, DType::I32,
                                  DType::I64, DType::U8,   DType::I8};
  auto add_ref = [](double a, double b) { return a + b; };
  auto mul_ref = [](double a, double b) { return a * b; };
  std::vector<OpCase> cases = {
      binary_case("add_same_shape", add, add_ref, {.shape = {4, 7}}, {.shape = {4, 7}}),
      // Broadcast in both directions: a grows along axis 1, b along axes 0 and 2.
      binary_case("add_broadcast_both", add, add_ref, {.shape = {4, 1, 3}}, {.shape = {5, 1}}),
      binary_case("add_int", add, add_ref, {.shape = {3, 4}, .low = -60, .high = 60, .integer = true},
                  {.shape = {4}, .low = -60, .high = 60, .integer = true}, ints),
      binary_case("add_u8", add, add_ref, {.shape = {3, 4}, .low = 0, .high = 100, .integer = true},
                  {.shape = {3, 1}, .low = 0, .high = 100, .integer = true}, {DType::U8}),
      binary_case("sub_strided_broadcast", sub, [](double a, double b) { return a - b; },
                  {.shape = {6, 5}, .non_contiguous = true}, {.shape = {1, 5}}),
      binary_case("mul", mul, mul_ref, {.shape = {2, 3, 4}}, {.shape = {3, 1}, .non_contiguous = true}),
      binary_case("mul_int", mul, mul_ref, {.shape = {5, 3}, .low = -11, .high = 11, .integer = true},
                  {.shape = {5, 3}, .low = -11, .high = 11, .integer = true}, ints),
      binary_case("mul_large_broadcast", mul, mul_ref, {.shape = {300, 130}, .non_contiguous = true},
                  {.shape = {130}}),
      binary_case("add_large_contiguous", add, add_ref, {.shape = {40000}}, {.shape = {40000}}),
      // Dense operands take 16-byte vectors on CUDA; 2^20 + 5 leaves a tail, the row bias a broadcast.
      binary_case("mul_dense_vectors", mul, mul_ref, {.shape = {(1 << 20) + 5}}, {.shape = {(1 << 20) + 5}}),
      binary_case("add_bias_rows", add, add_ref, {.shape = {512, 3, 384}}, {.shape = {384}}),
      binary_case("div", div, [](double a, double b) { return a / b; }, {.shape = {3, 5}, .low = -4, .high = 4},
                  {.shape = {3, 5}, .low = 0.5, .high = 3}),
      // Integer division truncates toward zero; x / 0 == 0.
      binary_case("div_int", div, int_div_ref, {.shape = {6, 7}, .low = -20, .high = 20, .integer = true},
                  {.shape = {6, 7}, .low = -3, .high = 4, .integer = true}, ints, true),
      binary_case("pow", pow, [](double a, double b) { return std::pow(a, b); },
                  {.shape = {4, 5}, .low = 0.5, .high = 2}, {.shape = {5}, .low = -2, .high = 2}),
      binary_case("pow_int", pow, [](double a, double b) { return b < 0 ? (a == 1 ? 1.0 : 0.0) : std::pow(a, b); },
                  {.shape = {4, 5}, .low = 0, .high = 5, .integer = true},
                  {.shape = {4, 5}, .low = -1, .high = 4, .integer = true}, {DType::I32, DType::I64}, true),
      binary_case("maximum", maximum, [](double a, double b) { return std::max(a, b); }, {.shape = {3, 1, 4}},
                  {.shape = {5, 4}}),
      binary_case("minimum", minimum, [](double a, double b) { return std::min(a, b); }, {.shape = {5, 4}},
                  {.shape = {3, 1, 4}, .non_contiguous = true}),
      binary_case("maximum_int", maximum, [](double a, double b) { return std::max(a, b); },
                  {.shape = {3, 1, 4}, .low = 0, .high = 100, .integer = true},
                  {.shape = {5, 4}, .low = 0, .high = 100, .integer = true}, all, true),
      binary_case("minimum_int", minimum, [](double a, double b) { return std::min(a, b); },
                  {.shape = {5, 4}, .low = 0, .high = 100, .integer = true},
                  {.shape = {3, 1, 4}, .low = 0, .high = 100, .integer = true, .non_contiguous = true}, all, true),
  };
  // Comparisons: small whole numbers so ties occur; u8 0/1 output compared exactly.
  struct Comparison {
    const char* name;
    Tensor (*op)(const Tensor&, const Tensor&);
    double (*ref)(double, double);
  };
  const Comparison comparisons[] = {
      {"eq", eq, [](double a, double b) { return double(a == b); }},
      {"ne", ne, [](double a, double b) { return double(a != b); }},
      {"lt", lt, [](double a, double b) { return double(a < b); }},
      {"le", le, [](double a, double b) { return double(a <= b); }},
      {"gt", gt, [](double a, double b) { return double(a > b); }},
      {"ge", ge, [](double a, double b) { return double(a >= b); }},
  };
  for (const Comparison& c : comparisons)
    cases.push_back(binary_case(c.name, c.op, c.ref, {.shape = {4, 1, 5}, .low = 0, .high = 4, .integer = true},
                                {.shape = {3, 5}, .low = 0, .high = 4, .integer = true, .non_contiguous = true},
                                all, true));
  // Mixed dtypes promote: i32 + float -> the float dtype.
  cases.push_back(binary_case("add_i32_and_float", add, add_ref,
                              {.shape = {3, 4}, .low = -5, .high = 5, .integer = true, .dtype = DType::I32},
                              {.shape = {3, 4}}, {DType::F32, DType::BF16, DType::F16}));
  return cases;
}

OpCase scalar_case(std::string name, std::function<Tensor(const Tensor&)> run, std::function<double(double)> ref,
                   InputSpec x, std::vector<DType> dtypes = floats, bool exact = false) {
  return {.name = std::move(name),
          .inputs = {std::move(x)},
          .run = [run](const Inputs& in) { return Outputs{run(in[0])}; },
          .reference = [ref](const RefInputs& in) { return RefOutputs{map(in[0], ref)}; },
          .dtypes = std::move(dtypes),
          .exact = exact};
}

std::vector<OpCase> scalar_cases() {
  return {
      scalar_case("add_scalar", [](const Tensor& x) { return add(x, 2.5); }, [](double v) { return v + 2.5; },
                  {.shape = {3, 4}}),
      scalar_case("mul_scalar_strided", [](const Tensor& x) { return mul(x, 0.5); }, [](double v) { return v * 0.5; },
                  {.shape = {5, 3}, .non_contiguous = true}),
      scalar_case("rsub_scalar", [](const Tensor& x) { return sub(1.0, x); }, [](double v) { return 1.0 - v; },
                  {.shape = {7}}),
      scalar_case("rdiv_scalar", [](const Tensor& x) { return div(2.0, x); }, [](double v) { return 2.0 / v; },
                  {.shape = {7}, .low = 0.5, .high = 2}),
      scalar_case("pow_scalar", [](const Tensor& x) { return pow(x, 2.0); }, [](double v) { return v * v; },
                  {.shape = {2, 5}, .low = -3, .high = 3}),
      scalar_case("maximum_scalar", [](const Tensor& x) { return maximum(x, 0.25); },
                  [](double v) { return std::max(v, 0.25); }, {.shape = {9}}),
      scalar_case("gt_scalar", [](const Tensor& x) { return gt(x, 0.0); }, [](double v) { return double(v > 0); },
                  {.shape = {4, 4}, .low = -2, .high = 2, .integer = true}, floats, true),
      scalar_case("composed_scalar_ops", [](const Tensor& x) { return sub(div(add(mul(x, 2.0), 1.0), 4.0), div(x, 2.0)); },
                  [](double v) { return (v * 2.0 + 1.0) / 4.0 - v / 2.0; }, {.shape = {3, 3}}),
      scalar_case("add_scalar_int", [](const Tensor& x) { return add(x, 3.0); }, [](double v) { return v + 3; },
                  {.shape = {3, 4}, .low = -50, .high = 50, .integer = true}, ints, true),
      scalar_case("mul_scalar_int", [](const Tensor& x) { return mul(x, -2.0); }, [](double v) { return -2 * v; },
                  {.shape = {3, 4}, .low = -50, .high = 50, .integer = true}, ints, true),
      // A scalar outside u8's range: compared exactly, and wrapped (mod 256) for arithmetic.
      scalar_case("lt_scalar_u8_out_of_range", [](const Tensor& x) { return lt(x, 300.0); },
                  [](double) { return 1.0; }, {.shape = {6}, .low = 0, .high = 256, .integer = true}, {DType::U8},
                  true),
      scalar_case("add_scalar_u8_wraps", [](const Tensor& x) { return add(x, 300.0); },
                  [](double v) { return std::fmod(v + 300, 256); },
                  {.shape = {6}, .low = 0, .high = 256, .integer = true}, {DType::U8}, true),
  };
}

std::vector<OpCase> where_cases() {
  auto select = [](const RefInputs& x) {
    RefTensor chosen_a = zip(x[0], x[1], [](double c, double a) { return c != 0 ? a : std::nan(""); });
    RefTensor out = zip(chosen_a, x[2], [](double a, double b) { return std::isnan(a) ? b : a; });
    return RefOutputs{out};
  };
  return {
      {.name = "where_u8_broadcast",
       .inputs = {{.shape = {4, 1}, .low = 0, .high = 2, .integer = true, .dtype = DType::U8},
                  {.shape = {1, 5}},
                  {.shape = {4, 5}, .non_contiguous = true}},
       .run = [](const Inputs& x) { return Outputs{where(x[0], x[1], x[2])}; },
       .reference = select,
       .dtypes = floats},
      {.name = "where_int",
       .inputs = {{.shape = {2, 1, 3}, .low = 0, .high = 2, .integer = true, .dtype = DType::U8},
                  {.shape = {4, 1}, .low = 0, .high = 100, .integer = true},
                  {.shape = {2, 4, 3}, .low = 0, .high = 100, .integer = true, .non_contiguous = true}},
       .run = [](const Inputs& x) { return Outputs{where(x[0], x[1], x[2])}; },
       .reference = select,
       .dtypes = {DType::I32, DType::I64, DType::U8, DType::I8},
       .exact = true},
      {.name = "where_float_cond",
       .inputs = {{.shape = {3, 4}, .low = -1, .high = 2, .integer = true, .dtype = DType::F32},
                  {.shape = {3, 4}},
                  {.shape = {4}}},
       .run = [](const Inputs& x) { return Outputs{where(x[0], x[1], x[2])}; },
       .reference = select},
  };
}

std::vector<OpCase> elementwise() {
  std::vector<OpCase> all;
  for (auto make : {unary_cases, binary_cases, scalar_cases, where_cases})
    for (OpCase& c : make()) all.push_back(std::move(c));
  return all;
}

}  // namespace
WICK_REGISTER_OP_CASES(elementwise);
}  // namespace wick::testing
