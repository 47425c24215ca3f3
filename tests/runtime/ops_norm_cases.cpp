// Op-harness entries for layer_norm, rms_norm and group_norm, against two-pass float64 references.
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

// Activations with a non-zero mean, so centring matters.
InputSpec activations(Shape shape, bool non_contiguous = false) { return spec(std::move(shape), non_contiguous, -2, 3); }

struct RefNorm {
  RefTensor y, mean, rstd;
};

// rows x row_size, normalized per row in two passes; channel(row, j) indexes weight and bias.
RefNorm ref_normalize(const RefTensor& x, const Shape& stats_shape, int64_t row_size, bool subtract_mean,
                      const std::function<int64_t(int64_t, int64_t)>& channel, const RefTensor* weight,
                      const RefTensor* bias, double eps) {
  RefNorm out{ref_like(x.shape), ref_like(stats_shape), ref_like(stats_shape)};
  int64_t rows = x.numel() / row_size;
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0;
    if (subtract_mean) {
      for (int64_t j = 0; j < row_size; ++j) mean += x.at(r * row_size + j);
      mean /= static_cast<double>(row_size);
    }
    double var = 0;
    for (int64_t j = 0; j < row_size; ++j) var += (x.at(r * row_size + j) - mean) * (x.at(r * row_size + j) - mean);
    var /= static_cast<double>(row_size);
    double rstd = 1.0 / std::sqrt(var + eps);
    out.mean.at(r) = mean;
    out.rstd.at(r) = rstd;
    for (int64_t j = 0; j < row_size; ++j) {
      double v = (x.at(r * row_size + j) - mean) * rstd;
      if (weight) v *= weight->at(channel(r, j));
      if (bias) v += bias->at(channel(r, j));
      out.y.at(r * row_size + j) = v;
    }
  }
  return out;
}

const std::vector<DType> all_float = {DType::F32, DType::F64, DType::BF16, DType::F16};

// Inputs: x, then weight and bias when has_weight / has_bias.
OpCase layer_norm_case(std::string name, Shape x, int64_t normalized_rank, bool has_weight, bool has_bias,
                       bool non_contiguous = false) {
  Shape normalized(x.end() - normalized_rank, x.end());
  OpCase op_case;
  op_case.name = std::move(name);
  op_case.inputs = {activations(x, non_contiguous)};
  if (has_weight) op_case.inputs.push_back(spec(normalized));
  if (has_bias) op_case.inputs.push_back(spec(normalized));
  op_case.run = [=](const Inputs& in) {
    Tensor weight = has_weight ? in[1] : Tensor();
    Tensor bias = has_bias ? in[has_weight ? 2 : 1] : Tensor();
    LayerNormResult r = layer_norm(in[0], normalized, weight, bias, 1e-5);
    return Outputs{r.y, r.mean, r.rstd};
  };
  op_case.reference = [=](const RefInputs& in) {
    Shape stats_shape(x.begin(), x.end() - normalized_rank);
    int64_t row_size = wick::numel(normalized);
    const RefTensor* weight = has_weight ? &in[1] : nullptr;
    const RefTensor* bias = has_bias ? &in[has_weight ? 2 : 1] : nullptr;
    RefNorm r = ref_normalize(in[0], stats_shape, row_size, true, [](int64_t, int64_t j) { return j; }, weight, bias,
                              1e-5);
    return RefOutputs{r.y, r.mean, r.rstd};
  };
  op_case.dtypes = all_float;
  return op_case;
}

OpCase rms_norm_case(std::string name, Shape x, bool has_weight, bool non_contiguous = false) {
  OpCase op_case;
  op_case.name = std::move(name);
  op_case.inputs = {activations(x, non_contiguous)};
  if (has_weight) op_case.inputs.push_back(spec({x.back()}));
  op_case.run = [=](const Inputs& in) {
    RmsNormResult r = rms_norm(in[0], has_weight ? in[1] : Tensor(), 1e-6);
    return Outputs{r.y, r.rstd};
  };
  op_case.reference = [=](const RefInputs& in) {
    Shape stats_shape(x.begin(), x.end() - 1);
    RefNorm r = ref_normalize(in[0], stats_shape, x.back(), false, [](int64_t, int64_t j) { return j; },
                              has_weight ? &in[1] : nullptr, nullptr, 1e-6);
    return RefOutputs{r.y, r.rstd};
  };
  op_case.dtypes = all_float;
  return op_case;
}

OpCase group_norm_case(std::string name, Shape x, int64_t n_groups, bool affine, bool non_contiguous = false) {
  int64_t channels = x[1];
  OpCase op_case;
  op_case.name = std::move(name);
  op_case.inputs = {activations(x, non_contiguous)};
  if (affine) op_case.inputs.insert(op_case.inputs.end(), {spec({channels}), spec({channels})});
  op_case.run = [=](const Inputs& in) {
    GroupNormResult r = group_norm(in[0], n_groups, affine ? in[1] : Tensor(), affine ? in[2] : Tensor(), 1e-5);
    return Outputs{r.y, r.mean, r.rstd};
  };
  op_case.reference = [=](const RefInputs& in) {
    int64_t spatial = wick::numel(x) / (x[0] * channels);
    int64_t per_group = channels / n_groups;
    auto channel = [=](int64_t row, int64_t j) { return (row % n_groups) * per_group + j / spatial; };
    RefNorm r = ref_normalize(in[0], {x[0], n_groups}, per_group * spatial, true, channel, affine ? &in[1] : nullptr,
                              affine ? &in[2] : nullptr, 1e-5);
    return RefOutputs{r.y, r.mean, r.rstd};
  };
  op_case.dtypes = all_float;
  return op_case;
}

std::vector<OpCase> norm_cases() {
  return {
      layer_norm_case("layer_norm_affine", {4, 33}, 1, true, true),
      layer_norm_case("layer_norm_plain", {3, 5, 64}, 1, false, false),
      layer_norm_case("layer_norm_weight_only", {6, 7}, 1, true, false),
      layer_norm_case("layer_norm_bias_only", {2, 40}, 1, false, true),
      layer_norm_case("layer_norm_two_axes", {2, 3, 4, 5}, 2, true, true),
      layer_norm_case("layer_norm_row_1500", {3, 1500}, 1, true, true),
      layer_norm_case("layer_norm_row_3072", {5, 3072}, 1, true, true),
      layer_norm_case("layer_norm_row_odd_9001", {2, 9001}, 1, true, false),
      layer_norm_case("layer_norm_short_rows", {70, 3}, 1, true, true),
      layer_norm_case("layer_norm_row_20000", {2, 20000}, 1, true, true),
      layer_norm_case("layer_norm_strided", {5, 24}, 1, true, true, true),
      layer_norm_case("layer_norm_single_row", {1}, 1, false, false),
      rms_norm_case("rms_norm_weight", {5, 48}, true),
      rms_norm_case("rms_norm_plain", {3, 7}, false),
      rms_norm_case("rms_norm_row_1100", {2, 1100}, true),
      rms_norm_case("rms_norm_row_3072", {4, 3072}, true),
      rms_norm_case("rms_norm_head_dim_128", {40, 128}, true),
      rms_norm_case("rms_norm_strided", {4, 2, 9}, true, true),
      group_norm_case("group_norm_spatial", {2, 6, 4, 5}, 3, true),
      group_norm_case("group_norm_no_spatial", {3, 8}, 4, false),
      group_norm_case("group_norm_3d", {2, 4, 3, 3, 2}, 2, true),
      group_norm_case("group_norm_instance", {2, 5, 3, 7}, 5, true),
      group_norm_case("group_norm_one_group", {2, 3, 6, 6}, 1, false),
      group_norm_case("group_norm_wide", {1, 4, 40, 40}, 2, true),
      group_norm_case("group_norm_strided", {2, 4, 3, 3}, 2, true, true),
  };
}

}  // namespace

WICK_REGISTER_OP_CASES(norm_cases);

}  // namespace wick::testing
