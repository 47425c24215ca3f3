#include "runtime/ops/norm.h"

#include "runtime/cpu/norm.h"
#include "runtime/cuda/cuda_api.h"
#include "runtime/cuda/norm.h"
#include "runtime/ops/copy.h"
#include "runtime/ops/norm_problem.h"

namespace wick {
namespace {

DType statistics_type(DType dtype) { return dtype == DType::F64 ? DType::F64 : DType::F32; }

// Checks an optional affine parameter and converts it to the statistics type, contiguous.
Tensor affine_parameter(const char* op, const char* what, const Tensor& parameter, const Shape& expected,
                        const Tensor& x) {
  if (!parameter.defined()) return parameter;
  WICK_CHECK(parameter.shape() == expected, op, ": ", what, " ", parameter.describe(), " should have shape ",
             expected, " for x ", x.describe());
  WICK_CHECK(is_floating(parameter.dtype()), op, ": floating dtypes only, got ", what, " ", parameter.describe());
  WICK_CHECK(parameter.device() == x.device(), op, ": ", what, " ", parameter.describe(),
             " on a different device than x ", x.describe());
  DType stats = statistics_type(x.dtype());
  return parameter.dtype() == stats ? parameter.contiguous() : cast(parameter, stats);
}

void check_input(const char* op, const Tensor& x) {
  WICK_CHECK(x.defined(), op, ": undefined tensor");
  WICK_CHECK(is_floating(x.dtype()), op, ": floating dtypes only, got x ", x.describe());
}

// Runs the row normalization; `mean` may be undefined (RMS norm).
void normalize(const NormProblem& problem, const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y,
               const Tensor& mean, const Tensor& rstd) {
  if (problem.rows == 0) return;
  const void* weight_data = weight.defined() ? weight.data() : nullptr;
  const void* bias_data = bias.defined() ? bias.data() : nullptr;
  void* mean_data = mean.defined() ? mean.data() : nullptr;
  Device device = x.device();
  if (device.is_cpu()) {
    cpu::normalize_rows(problem, x.dtype(), x.data(), weight_data, bias_data, y.data(), mean_data, rstd.data());
    return;
  }
  cuda::set_device(device.index);
  cuda::normalize_rows(problem, x.dtype(), x.data(), weight_data, bias_data, y.data(), mean_data, rstd.data(),
                       current_stream(device).handle);
}

}  // namespace

LayerNormResult layer_norm(const Tensor& x_in, const Shape& normalized_shape, const Tensor& weight_in,
                           const Tensor& bias_in, double eps) {
  check_input("layer_norm", x_in);
  int64_t rank = static_cast<int64_t>(normalized_shape.size());
  WICK_CHECK(rank >= 1 && rank <= x_in.dim(), "layer_norm: normalized shape ", normalized_shape,
             " must have between 1 and x.dim() axes, x is ", x_in.describe());
  Shape trailing(x_in.shape().end() - rank, x_in.shape().end());
  WICK_CHECK(trailing == normalized_shape, "layer_norm: normalized shape ", normalized_shape,
             " does not match the trailing axes of x ", x_in.describe());
  WICK_CHECK(numel(normalized_shape) > 0, "layer_norm: empty normalized shape ", normalized_shape);
  Tensor weight = affine_parameter("layer_norm", "weight", weight_in, normalized_shape, x_in);
  Tensor bias = affine_parameter("layer_norm", "bias", bias_in, normalized_shape, x_in);
  Tensor x = x_in.contiguous();
  Shape stats_shape(x.shape().begin(), x.shape().end() - rank);
  DType stats = statistics_type(x.dtype());
  LayerNormResult result{Tensor::empty(x.shape(), x.dtype(), x.device()),
                         Tensor::empty(stats_shape, stats, x.device()), Tensor::empty(stats_shape, stats, x.device())};
  NormProblem problem;
  problem.row_size = numel(normalized_shape);
  problem.rows = x.numel() / problem.row_size;
  problem.subtract_mean = true;
  problem.eps = eps;
  normalize(problem, x, weight, bias, result.y, result.mean, result.rstd);
  return result;
}

RmsNormResult rms_norm(const Tensor& x_in, const Tensor& weight_in, double eps) {
  check_input("rms_norm", x_in);
  WICK_CHECK(x_in.dim() >= 1 && x_in.size(-1) > 0, "rms_norm: x needs a non-empty last axis, got ",
             x_in.describe());
  Tensor weight = affine_parameter("rms_norm", "weight", weight_in, {x_in.size(-1)}, x_in);
  Tensor x = x_in.contiguous();
  Shape stats_shape(x.shape().begin(), x.shape().end() - 1);
  RmsNormResult result{Tensor::empty(x.shape(), x.dtype(), x.device()),
                       Tensor::empty(stats_shape, statistics_type(x.dtype()), x.device())};
  NormProblem problem;
  problem.row_size = x.size(-1);
  problem.rows = x.numel() / problem.row_size;
  problem.subtract_mean = false;
  problem.eps = eps;
  normalize(problem, x, weight, Tensor(), result.y, Tensor(), result.rstd);
  return result;
}

GroupNormResult group_norm(const Tensor& x_in, int64_t n_groups, const Tensor& weight_in, const Tensor& bias_in,
                           double eps) {
  check_input("group_norm", x_in);
  WICK_CHECK(x_in.dim() >= 2, "group_norm: expected x [N, C, *], got ", x_in.describe());
  int64_t n = x_in.size(0), channels = x_in.size(1);
  WICK_CHECK(n_groups >= 1 && channels % n_groups == 0, "group_norm: ", channels, " channels of x ", x_in.describe(),
             " do not split into ", n_groups, " groups");
  int64_t spatial = 1;
  for (int64_t axis = 2; axis < x_in.dim(); ++axis) spatial *= x_in.size(axis);
  WICK_CHECK(channels > 0 && spatial > 0, "group_norm: empty groups in x ", x_in.describe());
  Tensor weight = affine_parameter("group_norm", "weight", weight_in, {channels}, x_in);
  Tensor bias = affine_parameter("group_norm", "bias", bias_in, {channels}, x_in);
  Tensor x = x_in.contiguous();
  DType stats = statistics_type(x.dtype());
  GroupNormResult result{Tensor::empty(x.shape(), x.dtype(), x.device()),
                         Tensor::empty({n, n_groups}, stats, x.device()),
                         Tensor::empty({n, n_groups}, stats, x.device())};
  NormProblem problem;
  problem.rows = n * n_groups;
  problem.row_size = channels / n_groups * spatial;
  problem.subtract_mean = true;
  problem.groups = n_groups;
  problem.channels_per_group = channels / n_groups;
  problem.inner = spatial;
  problem.eps = eps;
  normalize(problem, x, weight, bias, result.y, result.mean, result.rstd);
  return result;
}

}  // namespace wick
