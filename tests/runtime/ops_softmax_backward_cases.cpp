// Op-harness entries for softmax_backward: grad_x = y * (g - sum(g * y)) along an axis, against a
// float64 reference that gathers each row by coordinates. y is drawn directly (the op is algebraic
// in y), positive like softmax outputs. Row lengths cover the kernel's tilings: a few lanes of a
// warp (1, 7, 16), a warp (33, 100), a block (3072, odd 9001) and rows streamed from memory (40000).
#include <functional>

#include "runtime/ops/softmax.h"
#include "tests/runtime/op_harness.h"

namespace wick::testing {
namespace {

InputSpec spec(Shape shape, double low, double high, bool non_contiguous = false) {
  InputSpec input;
  input.shape = std::move(shape);
  input.low = low;
  input.high = high;
  input.non_contiguous = non_contiguous;
  return input;
}

RefTensor ref_softmax_backward(const RefTensor& g, const RefTensor& y, int64_t axis) {
  int64_t rank = static_cast<int64_t>(y.shape.size());
  int64_t a = axis < 0 ? axis + rank : axis;
  RefTensor out = ref_like(y.shape);
  for (int64_t i = 0; i < y.numel(); ++i) {
    std::vector<int64_t> coords = coords_of(y.shape, i);
    if (coords[a] != 0) continue;  // once per row
    std::vector<int64_t> at;
    double dot = 0;
    for (int64_t k = 0; k < y.shape[a]; ++k) {
      coords[a] = k;
      at.push_back(linear_index(y.shape, coords));
      dot += g.at(at.back()) * y.at(at.back());
    }
    for (int64_t j : at) out.at(j) = y.at(j) * (g.at(j) - dot);
  }
  return out;
}

// Inputs: grad_y in [-1, 1), y in [0, y_high).
OpCase softmax_backward_case(std::string name, Shape shape, int64_t axis, double y_high = 1.0,
                             bool non_contiguous = false) {
  OpCase op_case;
  op_case.name = std::move(name);
  op_case.inputs = {spec(shape, -1, 1, non_contiguous), spec(shape, 0, y_high, non_contiguous)};
  op_case.run = [axis](const Inputs& in) { return Outputs{softmax_backward(in[0], in[1], axis)}; };
  op_case.reference = [axis](const RefInputs& in) { return RefOutputs{ref_softmax_backward(in[0], in[1], axis)}; };
  op_case.dtypes = {DType::F32, DType::BF16, DType::F16, DType::F64};
  // The row sum is rounded into the dtype's arithmetic once per element: relative to |g - dot|.
  op_case.cpu_tolerance = {{DType::F32, {2e-5, 2e-5}}, {DType::BF16, {2e-2, 2e-2}}, {DType::F16, {4e-3, 4e-3}}};
  op_case.cuda_tolerance = op_case.cpu_tolerance;
  return op_case;
}

std::vector<OpCase> softmax_backward_cases() {
  return {
      softmax_backward_case("softmax_backward_row_1", {5, 1}, -1),
      softmax_backward_case("softmax_backward_row_7", {3, 7}, -1),
      softmax_backward_case("softmax_backward_row_16_many", {300, 16}, -1, 0.125),
      softmax_backward_case("softmax_backward_row_33", {4, 33}, -1),
      softmax_backward_case("softmax_backward_row_100", {70, 100}, -1, 0.02),
      softmax_backward_case("softmax_backward_row_3072", {6, 3072}, -1, 2.0 / 3072),
      softmax_backward_case("softmax_backward_row_9001", {2, 9001}, -1, 2.0 / 9001),
      softmax_backward_case("softmax_backward_row_40000", {2, 40000}, -1, 2.0 / 40000),
      softmax_backward_case("softmax_backward_single", {1}, 0),
      softmax_backward_case("softmax_backward_first_axis", {5, 3, 4}, 0),
      softmax_backward_case("softmax_backward_middle_axis_strided", {3, 6, 4}, 1, 1.0, true),
      softmax_backward_case("softmax_backward_last_axis_strided", {4, 2, 9}, -1, 1.0, true),
  };
}

}  // namespace

WICK_REGISTER_OP_CASES(softmax_backward_cases);

}  // namespace wick::testing
