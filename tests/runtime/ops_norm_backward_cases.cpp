// Op-harness entries for layer_norm_backward, rms_norm_backward and group_norm_backward: the
// forward runs first (its mean and rstd feed the backward); the float64 references compute the
// statistics themselves and apply the hand-derived formulas
//   grad_x = rstd * (g w - mean(g w) - xhat * mean(g w xhat))   (RMS: no mean(g w) term)
//   grad_weight[c] = sum g xhat,  grad_bias[c] = sum g           (over all elements of channel c).
#include <cmath>
#include <functional>

#include "runtime/ops/norm.h"
#include "tests/runtime/op_harness.h"

namespace wick::testing {
namespace {

InputSpec spec(Shape shape, bool non_contiguous = false, double low = -1.0, double high = 1.0) {
  InputSpec input;
  input.shape = std::move(shape);
  input.non_contiguous = non_contiguous;
  input.low = low;
  input.high = high;
  return input;
}

struct RefGrads {
  RefTensor grad_x, grad_weight, grad_bias;
};

// x and g [rows, row_size]; channel(row, j) indexes weight and the parameter gradients.
RefGrads ref_backward(const RefTensor& g, const RefTensor& x, int64_t row_size, bool subtract_mean,
                      const std::function<int64_t(int64_t, int64_t)>& channel, const RefTensor* weight,
                      const Shape& parameter_shape, double eps) {
  RefGrads out{ref_like(x.shape), ref_like(parameter_shape), ref_like(parameter_shape)};
  int64_t rows = x.numel() / row_size;
  double d = static_cast<double>(row_size);
  for (int64_t r = 0; r < rows; ++r) {
    auto at = [&](const RefTensor& t, int64_t j) { return t.at(r * row_size + j); };
    double mean = 0;
    if (subtract_mean) {
      for (int64_t j = 0; j < row_size; ++j) mean += at(x, j);
      mean /= d;
    }
    double var = 0;
    for (int64_t j = 0; j < row_size; ++j) var += (at(x, j) - mean) * (at(x, j) - mean);
    double rstd = 1.0 / std::sqrt(var / d + eps);
    auto xhat = [&](int64_t j) { return (at(x, j) - mean) * rstd; };
    auto gw = [&](int64_t j) { return at(g, j) * (weight ? weight->at(channel(r, j)) : 1.0); };
    double mean_gw = 0, mean_gw_xhat = 0;
    for (int64_t j = 0; j < row_size; ++j) {
      mean_gw += gw(j) / d;
      mean_gw_xhat += gw(j) * xhat(j) / d;
    }
    if (!subtract_mean) mean_gw = 0;
    for (int64_t j = 0; j < row_size; ++j) {
      out.grad_x.at(r * row_size + j) = rstd * (gw(j) - mean_gw - xhat(j) * mean_gw_xhat);
      out.grad_weight.at(channel(r, j)) += at(g, j) * xhat(j);
      out.grad_bias.at(channel(r, j)) += at(g, j);
    }
  }
  return out;
}

const std::vector<DType> all_float = {DType::F32, DType::F64, DType::BF16, DType::F16};
// grad_x is rounded to the dtype; parameter gradients are f32 sums of up to a few thousand terms.
const std::vector<std::pair<DType, Tolerance>> tolerance = {
    {DType::F32, {5e-5, 5e-5}}, {DType::BF16, {2e-2, 2e-2}}, {DType::F16, {4e-3, 4e-3}}};

// Inputs: grad_y, x, then weight when has_weight. Outputs: grad_x, grad_weight?, grad_bias.
OpCase layer_norm_case(std::string name, Shape x, int64_t normalized_rank, bool has_weight,
                       bool non_contiguous = false) {
  Shape normalized(x.end() - normalized_rank, x.end());
  OpCase op_case;
  op_case.name = std::move(name);
  op_case.inputs = {spec(x), spec(x, non_contiguous, -2, 3)};
  if (has_weight) op_case.inputs.push_back(spec(normalized));
  op_case.run = [=](const Inputs& in) {
    Tensor weight = has_weight ? in[2] : Tensor();
    LayerNormResult f = layer_norm(in[1], normalized, weight, Tensor(), 1e-5);
    LayerNormGrads r = layer_norm_backward(in[0], in[1], f.mean, f.rstd, weight);
    return has_weight ? Outputs{r.grad_x, r.grad_weight, r.grad_bias} : Outputs{r.grad_x, r.grad_bias};
  };
  op_case.reference = [=](const RefInputs& in) {
    RefGrads r = ref_backward(in[0], in[1], wick::numel(normalized), true, [](int64_t, int64_t j) { return j; },
                              has_weight ? &in[2] : nullptr, normalized, 1e-5);
    return has_weight ? RefOutputs{r.grad_x, r.grad_weight, r.grad_bias} : RefOutputs{r.grad_x, r.grad_bias};
  };
  op_case.dtypes = all_float;
  op_case.cpu_tolerance = tolerance;
  op_case.cuda_tolerance = tolerance;
  return op_case;
}

OpCase rms_norm_case(std::string name, Shape x, bool has_weight, bool non_contiguous = false) {
  OpCase op_case;
  op_case.name = std::move(name);
  op_case.inputs = {spec(x), spec(x, non_contiguous, -2, 3)};
  if (has_weight) op_case.inputs.push_back(spec({x.back()}));
  op_case.run = [=](const Inputs& in) {
    Tensor weight = has_weight ? in[2] : Tensor();
    RmsNormResult f = rms_norm(in[1], weight, 1e-6);
    RmsNormGrads r = rms_norm_backward(in[0], in[1], f.rstd, weight);
    return has_weight ? Outputs{r.grad_x, r.grad_weight} : Outputs{r.grad_x};
  };
  op_case.reference = [=](const RefInputs& in) {
    RefGrads r = ref_backward(in[0], in[1], x.back(), false, [](int64_t, int64_t j) { return j; },
                              has_weight ? &in[2] : nullptr, {x.back()}, 1e-6);
    return has_weight ? RefOutputs{r.grad_x, r.grad_weight} : RefOutputs{r.grad_x};
  };
  op_case.dtypes = all_float;
  op_case.cpu_tolerance = tolerance;
  op_case.cuda_tolerance = tolerance;
  return op_case;
}

OpCase group_norm_case(std::string name, Shape x, int64_t n_groups, bool has_weight, bool non_contiguous = false) {
  int64_t channels = x[1];
  OpCase op_case;
  op_case.name = std::move(name);
  op_case.inputs = {spec(x), spec(x, non_contiguous, -2, 3)};
  if (has_weight) op_case.inputs.push_back(spec({channels}));
  op_case.run = [=](const Inputs& in) {
    Tensor weight = has_weight ? in[2] : Tensor();
    GroupNormResult f = group_norm(in[1], n_groups, weight, Tensor(), 1e-5);
    GroupNormGrads r = group_norm_backward(in[0], in[1], f.mean, f.rstd, weight);
    return has_weight ? Outputs{r.grad_x, r.grad_weight, r.grad_bias} : Outputs{r.grad_x, r.grad_bias};
  };
  op_case.reference = [=](const RefInputs& in) {
    int64_t spatial = wick::numel(x) / (x[0] * channels);
    int64_t per_group = channels / n_groups;
    auto channel = [=](int64_t row, int64_t j) { return (row % n_groups) * per_group + j / spatial; };
    RefGrads r = ref_backward(in[0], in[1], per_group * spatial, true, channel, has_weight ? &in[2] : nullptr,
                              {channels}, 1e-5);
    return has_weight ? RefOutputs{r.grad_x, r.grad_weight, r.grad_bias} : RefOutputs{r.grad_x, r.grad_bias};
  };
  op_case.dtypes = all_float;
  op_case.cpu_tolerance = tolerance;
  op_case.cuda_tolerance = tolerance;
  return op_case;
}

// Groups of at least 4 elements: with 2, x - mean cancels so badly that the f32 statistics alone
// put grad_x off by ~1e-3 (the same holds for the f32 forward).
std::vector<OpCase> norm_backward_cases() {
  return {
      layer_norm_case("layer_norm_backward_affine", {4, 33}, 1, true),
      layer_norm_case("layer_norm_backward_plain", {3, 5, 64}, 1, false),
      layer_norm_case("layer_norm_backward_two_axes", {2, 3, 4, 5}, 2, true),
      layer_norm_case("layer_norm_backward_many_rows", {600, 40}, 1, true),
      layer_norm_case("layer_norm_backward_row_1500", {3, 1500}, 1, true),
      layer_norm_case("layer_norm_backward_row_20000", {2, 20000}, 1, true),
      layer_norm_case("layer_norm_backward_rows_3072", {900, 3072}, 1, true),
      layer_norm_case("layer_norm_backward_odd_9001", {3, 9001}, 1, true),
      layer_norm_case("layer_norm_backward_odd_1001", {3, 1001}, 1, false),
      layer_norm_case("layer_norm_backward_strided", {5, 24}, 1, true, true),
      layer_norm_case("layer_norm_backward_single", {1, 1}, 1, true),
      rms_norm_case("rms_norm_backward_weight", {5, 48}, true),
      rms_norm_case("rms_norm_backward_plain", {3, 7}, false),
      rms_norm_case("rms_norm_backward_row_1100", {2, 1100}, true),
      rms_norm_case("rms_norm_backward_many_rows", {300, 70}, true),
      rms_norm_case("rms_norm_backward_rows_3072", {64, 3072}, true),
      rms_norm_case("rms_norm_backward_head_dim_128", {500, 128}, true),
      rms_norm_case("rms_norm_backward_short_rows", {400, 12}, true),
      rms_norm_case("rms_norm_backward_strided", {4, 2, 9}, true, true),
      group_norm_case("group_norm_backward_spatial", {2, 6, 4, 5}, 3, true),
      group_norm_case("group_norm_backward_no_spatial", {3, 8}, 2, false),
      group_norm_case("group_norm_backward_3d", {2, 4, 3, 3, 2}, 2, true),
      group_norm_case("group_norm_backward_instance", {2, 5, 3, 7}, 5, true),
      group_norm_case("group_norm_backward_wide", {1, 4, 40, 40}, 2, true),
      group_norm_case("group_norm_backward_strided", {2, 4, 3, 3}, 2, true, true),
  };
}

}  // namespace

WICK_REGISTER_OP_CASES(norm_backward_cases);

}  // namespace wick::testing
