// Op-harness entries for reductions and softmax (runtime/ops/reduce.h, runtime/ops/softmax.h).
// References group the input's elements per output position in plain float64 loops.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "runtime/ops/reduce.h"
#include "runtime/ops/softmax.h"
#include "tests/runtime/op_harness.h"

// InputSpec::dtype (a std::optional without a default member initializer) makes GCC flag every
// designated initializer that leaves it out; leaving it out is the intended use.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace wick::testing {
namespace {

using RowFn = std::function<double(const std::vector<double>&)>;

const std::vector<DType> floats = {DType::F32, DType::BF16, DType::F16, DType::F64};
const std::vector<DType> floats_and_ints = {DType::F32, DType::BF16, DType::F16, DType::F64,
                                            DType::I32, DType::I64, DType::U8};

// Reduces x over `axes` (empty = all; negative allowed): every output element gets the values of
// its row in row-major order over the reduced axes.
RefTensor ref_reduce(const RefTensor& x, std::vector<int64_t> axes, bool keepdim, const RowFn& fn) {
  int64_t rank = static_cast<int64_t>(x.shape.size());
  std::vector<bool> reduced(static_cast<size_t>(rank), axes.empty());
  for (int64_t a : axes) reduced[static_cast<size_t>(a < 0 ? a + rank : a)] = true;
  Shape kept_shape, out_shape;
  for (int64_t a = 0; a < rank; ++a) {
    if (!reduced[a]) kept_shape.push_back(x.shape[a]);
    if (!reduced[a] || keepdim) out_shape.push_back(reduced[a] ? 1 : x.shape[a]);
  }
  std::vector<std::vector<double>> rows(static_cast<size_t>(numel(kept_shape)));
  for (int64_t i = 0; i < x.numel(); ++i) {
    std::vector<int64_t> coords = coords_of(x.shape, i), kept;
    for (int64_t a = 0; a < rank; ++a)
      if (!reduced[a]) kept.push_back(coords[a]);
    rows[static_cast<size_t>(linear_index(kept_shape, kept))].push_back(x.at(i));
  }
  RefTensor out = ref_like(out_shape);
  for (size_t r = 0; r < rows.size(); ++r) out.values[r] = fn(rows[r]);
  return out;
}

double row_sum(const std::vector<double>& v) {
  double s = 0;
  for (double e : v) s += e;
  return s;
}
double row_mean(const std::vector<double>& v) { return row_sum(v) / static_cast<double>(v.size()); }
double row_max(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }
double row_min(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }
double row_argmax(const std::vector<double>& v) {
  size_t best = 0;
  for (size_t i = 1; i < v.size(); ++i)
    if (v[i] > v[best]) best = i;  // strict: ties keep the first index
  return static_cast<double>(best);
}
RowFn row_var(double correction) {
  return [correction](const std::vector<double>& v) {
    double m = row_mean(v), s = 0;
    for (double e : v) s += (e - m) * (e - m);
    return s / std::max(static_cast<double>(v.size()) - correction, 0.0);
  };
}
// Long double so exp(100) is no problem for the reference itself.
double row_logsumexp(const std::vector<double>& v) {
  long double s = 0;
  for (double e : v) s += std::exp(static_cast<long double>(e));
  return static_cast<double>(std::log(s));
}

using ReduceFn = std::function<Tensor(const Tensor&)>;

OpCase reduce_case(std::string name, ReduceFn run, std::vector<int64_t> axes, bool keepdim, RowFn fn,
                   InputSpec x, std::vector<DType> dtypes = floats, bool exact = false,
                   std::vector<std::pair<DType, Tolerance>> tolerance = {}) {
  return {.name = std::move(name),
          .inputs = {std::move(x)},
          .run = [run](const Inputs& in) { return Outputs{run(in[0])}; },
          .reference = [axes, keepdim, fn](const RefInputs& in) { return RefOutputs{ref_reduce(in[0], axes, keepdim, fn)}; },
          .dtypes = std::move(dtypes),
          .cpu_tolerance = tolerance,
          .cuda_tolerance = tolerance,
          .exact = exact};
}

std::vector<OpCase> reduction_cases() {
  // Whole numbers so integer dtypes (and exact sums) work; u8 needs low >= 0.
  InputSpec small_ints{.shape = {3, 5, 4}, .low = 0, .high = 20, .integer = true};
  InputSpec ties{.shape = {4, 6, 5}, .low = 0, .high = 3, .integer = true};
  std::vector<std::pair<DType, Tolerance>> long_sum = {{DType::F32, {1e-4, 1e-5}}};
  return {
      reduce_case("sum_all", [](const Tensor& x) { return sum(x); }, {}, false, row_sum, small_ints, floats_and_ints),
      reduce_case("sum_middle_axis", [](const Tensor& x) { return sum(x, {1}); }, {1}, false, row_sum,
                  {.shape = {3, 5, 4}}),
      reduce_case("sum_middle_axis_keepdim", [](const Tensor& x) { return sum(x, {-2}, true); }, {1}, true, row_sum,
                  small_ints, floats_and_ints),
      reduce_case("sum_non_adjacent_axes", [](const Tensor& x) { return sum(x, {0, -2}); }, {0, 2}, false, row_sum,
                  {.shape = {3, 4, 5, 6}, .non_contiguous = true}),
      reduce_case("sum_non_adjacent_axes_keepdim", [](const Tensor& x) { return sum(x, {3, 1}, true); }, {1, 3}, true,
                  row_sum, {.shape = {3, 4, 5, 6}}),
      // Leading / middle axes of a contiguous tensor, summed in place on the CPU (cpu::sum_middle): more
      // than 256 reduced rows (blocks of partial sums) and more than 256 kept columns (column blocks).
      reduce_case("sum_leading_axes_long", [](const Tensor& x) { return sum(x, {0, 1}); }, {0, 1}, false, row_sum,
                  {.shape = {30, 20, 300}}, floats, false, long_sum),
      reduce_case("mean_middle_axis_long", [](const Tensor& x) { return mean(x, {1}, true); }, {1}, true, row_mean,
                  {.shape = {3, 700, 7}}, floats, false, {{DType::F32, {1e-5, 1e-4}}}),
      // Many rows: the OpenMP path over rows.
      reduce_case("sum_rows_large", [](const Tensor& x) { return sum(x, {1}); }, {1}, false, row_sum,
                  {.shape = {300, 130}}, floats, false, long_sum),
      // One long row: pairwise summation on the CPU, block-per-row on CUDA.
      reduce_case("sum_long_row", [](const Tensor& x) { return sum(x); }, {}, false, row_sum, {.shape = {40000}},
                  floats, false, {{DType::F32, {1e-3, 1e-5}}, {DType::F16, {0.05, 2e-3}}}),
      reduce_case("sum_long_row_int", [](const Tensor& x) { return sum(x); }, {}, false, row_sum,
                  {.shape = {40000}, .low = -100, .high = 100, .integer = true}, {DType::I32, DType::I64}),
      // Few long rows: split over many blocks on CUDA, partials combined in a second pass. 2^20 + 7
      // elements leaves a tail after the vector loads; 3 rows of 65541 make unaligned row starts.
      reduce_case("sum_all_split", [](const Tensor& x) { return sum(x); }, {}, false, row_sum,
                  {.shape = {(1 << 20) + 7}}, floats, false, {{DType::F32, {2e-2, 1e-4}}, {DType::F16, {2.0, 1e-2}}}),
      reduce_case("sum_all_split_int", [](const Tensor& x) { return sum(x); }, {}, false, row_sum,
                  {.shape = {1 << 20}, .low = -100, .high = 100, .integer = true}, {DType::I32, DType::I64, DType::I8}),
      reduce_case("mean_all_split", [](const Tensor& x) { return mean(x); }, {}, false, row_mean,
                  {.shape = {1024, 1024}, .low = 0, .high = 2}, floats, false, {{DType::F32, {1e-5, 1e-4}}}),
      reduce_case("mean_few_rows_split", [](const Tensor& x) { return mean(x, {1}); }, {1}, false, row_mean,
                  {.shape = {3, 65541}}, floats, false, {{DType::F32, {1e-5, 1e-4}}}),
      reduce_case("mean_split_strided", [](const Tensor& x) { return mean(x, {0, 2}); }, {0, 2}, false, row_mean,
                  {.shape = {300, 2, 400}, .non_contiguous = true}, floats, false, {{DType::F32, {1e-5, 1e-4}}}),
      reduce_case("max_all_split", [](const Tensor& x) { return max(x); }, {}, false, row_max,
                  {.shape = {(1 << 20) + 3}, .low = 0, .high = 100, .integer = true}, floats_and_ints),
      reduce_case("min_few_rows_split", [](const Tensor& x) { return min(x, {-1}); }, {-1}, false, row_min,
                  {.shape = {2, 70001}}, floats),
      reduce_case("var_all_split_offset", [](const Tensor& x) { return var(x); }, {}, false, row_var(1),
                  {.shape = {1 << 20}, .low = 1000, .high = 1001}, {DType::F32, DType::F64}, false,
                  {{DType::F32, {1e-4, 1e-3}}}),
      reduce_case("logsumexp_all_split", [](const Tensor& x) { return logsumexp(x); }, {}, false, row_logsumexp,
                  {.shape = {1 << 20}, .low = 80, .high = 100}, floats, false, {{DType::F32, {1e-4, 1e-5}}}),
      reduce_case("mean_axes_keepdim", [](const Tensor& x) { return mean(x, {0, 2}, true); }, {0, 2}, true, row_mean,
                  {.shape = {3, 5, 4}}),
      reduce_case("mean_all_strided", [](const Tensor& x) { return mean(x); }, {}, false, row_mean,
                  {.shape = {7, 9}, .non_contiguous = true}),
      reduce_case("max_middle_axis", [](const Tensor& x) { return max(x, {1}); }, {1}, false, row_max, small_ints,
                  floats_and_ints),
      reduce_case("max_strided", [](const Tensor& x) { return max(x, {-1}, true); }, {-1}, true, row_max,
                  {.shape = {6, 700}, .non_contiguous = true}),
      reduce_case("min_non_adjacent_axes", [](const Tensor& x) { return min(x, {0, 2}); }, {0, 2}, false, row_min,
                  {.shape = {3, 4, 5}}),
      reduce_case("min_int", [](const Tensor& x) { return min(x, {2}); }, {2}, false, row_min,
                  {.shape = {3, 4, 5}, .low = -100, .high = 100, .integer = true}, {DType::I32, DType::I64}),
      // Argmax: few distinct values so ties are common; the first index must win.
      reduce_case("argmax_last_axis_ties", [](const Tensor& x) { return argmax(x, {-1}); }, {-1}, false, row_argmax,
                  ties, floats_and_ints, true),
      reduce_case("argmax_first_axis_ties_keepdim", [](const Tensor& x) { return argmax(x, {0}, true); }, {0}, true,
                  row_argmax, ties, floats_and_ints, true),
      reduce_case("argmax_non_adjacent_axes", [](const Tensor& x) { return argmax(x, {0, 2}); }, {0, 2}, false,
                  row_argmax, ties, floats_and_ints, true),
      reduce_case("argmax_long_rows", [](const Tensor& x) { return argmax(x, {1}); }, {1}, false, row_argmax,
                  {.shape = {3, 1000}, .low = 0, .high = 50, .integer = true}, {DType::F32, DType::I32}, true),
      reduce_case("argmax_strided", [](const Tensor& x) { return argmax(x); }, {}, false, row_argmax,
                  {.shape = {5, 7}, .non_contiguous = true}, floats, true),
      reduce_case("var_default_correction", [](const Tensor& x) { return var(x, {1}); }, {1}, false, row_var(1),
                  {.shape = {4, 9, 3}}),
      reduce_case("var_population_all", [](const Tensor& x) { return var(x, {}, true, 0.0); }, {}, true, row_var(0),
                  {.shape = {5, 6}, .non_contiguous = true}),
      // A large offset: a one-pass sum of squares would cancel catastrophically in f32.
      reduce_case("var_offset", [](const Tensor& x) { return var(x, {-1}); }, {-1}, false, row_var(1),
                  {.shape = {3, 600}, .low = 1000, .high = 1001}, {DType::F32, DType::F64},
                  false, {{DType::F32, {1e-4, 1e-3}}}),
      reduce_case("logsumexp_last_axis", [](const Tensor& x) { return logsumexp(x, {-1}); }, {-1}, false,
                  row_logsumexp, {.shape = {4, 7}, .low = -3, .high = 3}),
      // exp(100) overflows f32: only a max-subtracted logsumexp gets this right.
      reduce_case("logsumexp_large_values", [](const Tensor& x) { return logsumexp(x, {1}); }, {1}, false,
                  row_logsumexp, {.shape = {3, 40, 2}, .low = 80, .high = 100}),
      reduce_case("logsumexp_non_adjacent_keepdim", [](const Tensor& x) { return logsumexp(x, {0, 2}, true); },
                  {0, 2}, true, row_logsumexp, {.shape = {3, 4, 5}, .low = -5, .high = 5, .non_contiguous = true}),
  };
}

// Softmax along `axis` in float64.
RefTensor ref_softmax(const RefTensor& x, int64_t axis, bool log) {
  int64_t rank = static_cast<int64_t>(x.shape.size());
  int64_t a = axis < 0 ? axis + rank : axis;
  RefTensor out = ref_like(x.shape);
  for (int64_t i = 0; i < x.numel(); ++i) {
    std::vector<int64_t> coords = coords_of(x.shape, i);
    if (coords[a] != 0) continue;  // once per row
    std::vector<int64_t> at;
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t k = 0; k < x.shape[a]; ++k) {
      coords[a] = k;
      at.push_back(linear_index(x.shape, coords));
      m = std::max(m, x.at(at.back()));
    }
    double s = 0;
    for (int64_t j : at) s += std::exp(x.at(j) - m);
    for (int64_t j : at) out.at(j) = log ? x.at(j) - m - std::log(s) : std::exp(x.at(j) - m) / s;
  }
  return out;
}

OpCase softmax_case(std::string name, bool log, int64_t axis, InputSpec x) {
  return {.name = std::move(name),
          .inputs = {std::move(x)},
          .run = [log, axis](const Inputs& in) { return Outputs{log ? log_softmax(in[0], axis) : softmax(in[0], axis)}; },
          .reference = [log, axis](const RefInputs& in) { return RefOutputs{ref_softmax(in[0], axis, log)}; },
          .dtypes = floats};
}

std::vector<OpCase> softmax_cases() {
  return {
      softmax_case("softmax_last_axis", false, -1, {.shape = {4, 33}, .low = -4, .high = 4}),
      softmax_case("softmax_first_axis", false, 0, {.shape = {5, 3, 4}, .low = -4, .high = 4}),
      softmax_case("softmax_middle_axis_strided", false, 1, {.shape = {3, 6, 4}, .low = -4, .high = 4,
                                                             .non_contiguous = true}),
      softmax_case("softmax_large_values", false, -1, {.shape = {3, 50}, .low = 80, .high = 100}),
      softmax_case("softmax_long_rows", false, -1, {.shape = {40, 1000}, .low = -4, .high = 4}),
      softmax_case("log_softmax_last_axis", true, -1, {.shape = {4, 33}, .low = -4, .high = 4}),
      softmax_case("log_softmax_middle_axis", true, -2, {.shape = {3, 6, 4}, .low = -4, .high = 4}),
      softmax_case("log_softmax_large_values", true, 0, {.shape = {50, 3}, .low = 80, .high = 100}),
  };
}

std::vector<OpCase> reduce() {
  std::vector<OpCase> all = reduction_cases();
  for (OpCase& c : softmax_cases()) all.push_back(std::move(c));
  return all;
}

}  // namespace
WICK_REGISTER_OP_CASES(reduce);
}  // namespace wick::testing
