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

// ---- gradients ----

namespace {

// Checks the tensors shared by all three backwards; returns grad_y as x's dtype, contiguous.
Tensor check_common(const char* op, const Tensor& grad_y, const Tensor& x) {
  WICK_CHECK(grad_y.defined() && x.defined(), op, ": undefined tensor");
  WICK_CHECK(is_floating(x.dtype()) && is_floating(grad_y.dtype()), op, ": floating dtypes only, got grad_y ",
             grad_y.describe(), " and x ", x.describe());
  WICK_CHECK(grad_y.shape() == x.shape(), op, ": grad_y ", grad_y.describe(), " and x ", x.describe(),
             " differ in shape");
  WICK_CHECK(grad_y.device() == x.device(), op, ": grad_y ", grad_y.describe(), " and x ", x.describe(),
             " on different devices");
  return grad_y.dtype() == x.dtype() ? grad_y.contiguous() : cast(grad_y, x.dtype());
}

// A saved statistic: the given shape, on x's device, converted to the statistics type.
Tensor check_statistic(const char* op, const char* what, const Tensor& stat, const Shape& expected, const Tensor& x) {
  WICK_CHECK(stat.defined(), op, ": undefined ", what);
  WICK_CHECK(stat.shape() == expected, op, ": ", what, " ", stat.describe(), " should have shape ", expected,
             " for x ", x.describe());
  WICK_CHECK(stat.device() == x.device(), op, ": ", what, " ", stat.describe(), " on a different device than x ",
             x.describe());
  WICK_CHECK(is_floating(stat.dtype()), op, ": floating dtypes only, got ", what, " ", stat.describe());
  DType stats = statistics_type(x.dtype());
  return stat.dtype() == stats ? stat.contiguous() : cast(stat, stats);
}

// Runs the backward; undefined outputs are not computed.
void run(const NormProblem& problem, const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& rstd,
         const Tensor& weight, const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias) {
  auto data_or_null = [](const Tensor& t) -> const void* { return t.defined() ? t.data() : nullptr; };
  auto out_or_null = [](const Tensor& t) -> void* { return t.defined() ? t.data() : nullptr; };
  Device device = x.device();
  if (device.is_cpu()) {
    cpu::normalize_rows_backward(problem, x.dtype(), grad_y.data(), x.data(), data_or_null(mean), rstd.data(),
                                 data_or_null(weight), out_or_null(grad_x), out_or_null(grad_weight),
                                 out_or_null(grad_bias));
    return;
  }
  cuda::set_device(device.index);
  cuda::normalize_rows_backward(problem, x.dtype(), grad_y.data(), x.data(), data_or_null(mean), rstd.data(),
                                data_or_null(weight), out_or_null(grad_x), out_or_null(grad_weight),
                                out_or_null(grad_bias), current_stream(device).handle);
}

}  // namespace

LayerNormGrads layer_norm_backward(const Tensor& grad_y_in, const Tensor& x_in, const Tensor& mean_in,
                                   const Tensor& rstd_in, const Tensor& weight_in, bool with_bias_grad) {
  const char* op = "layer_norm_backward";
  Tensor grad_y = check_common(op, grad_y_in, x_in);
  WICK_CHECK(rstd_in.defined() && rstd_in.dim() < x_in.dim(), op, ": rstd ",
             rstd_in.defined() ? rstd_in.describe() : std::string("undefined"),
             " must have fewer axes than x ", x_in.describe());
  int64_t rank = x_in.dim() - rstd_in.dim();
  Shape stats_shape(x_in.shape().begin(), x_in.shape().end() - rank);
  Shape normalized(x_in.shape().end() - rank, x_in.shape().end());
  Tensor mean = check_statistic(op, "mean", mean_in, stats_shape, x_in);
  Tensor rstd = check_statistic(op, "rstd", rstd_in, stats_shape, x_in);
  Tensor weight = weight_in.defined() ? check_statistic(op, "weight", weight_in, normalized, x_in) : Tensor();
  Tensor x = x_in.contiguous();
  DType stats = statistics_type(x.dtype());
  LayerNormGrads grads;
  grads.grad_x = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (weight.defined()) grads.grad_weight = Tensor::empty(normalized, stats, x.device());
  if (with_bias_grad) grads.grad_bias = Tensor::empty(normalized, stats, x.device());
  NormProblem problem;
  problem.row_size = numel(normalized);
  problem.rows = problem.row_size == 0 ? 0 : x.numel() / problem.row_size;
  problem.subtract_mean = true;
  if (problem.row_size > 0) run(problem, grad_y, x, mean, rstd, weight, grads.grad_x, grads.grad_weight, grads.grad_bias);
  return grads;
}

RmsNormGrads rms_norm_backward(const Tensor& grad_y_in, const Tensor& x_in, const Tensor& rstd_in,
                               const Tensor& weight_in) {
  const char* op = "rms_norm_backward";
  Tensor grad_y = check_common(op, grad_y_in, x_in);
  WICK_CHECK(x_in.dim() >= 1, op, ": x needs at least one axis, got ", x_in.describe());
  Shape stats_shape(x_in.shape().begin(), x_in.shape().end() - 1);
  Tensor rstd = check_statistic(op, "rstd", rstd_in, stats_shape, x_in);
  Tensor weight = weight_in.defined() ? check_statistic(op, "weight", weight_in, {x_in.size(-1)}, x_in) : Tensor();
  Tensor x = x_in.contiguous();
  RmsNormGrads grads;
  grads.grad_x = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (weight.defined()) grads.grad_weight = Tensor::empty({x.size(-1)}, statistics_type(x.dtype()), x.device());
  NormProblem problem;
  problem.row_size = x.size(-1);
  problem.rows = problem.row_size == 0 ? 0 : x.numel() / problem.row_size;
  problem.subtract_mean = false;
  if (problem.row_size > 0) run(problem, grad_y, x, Tensor(), rstd, weight, grads.grad_x, grads.grad_weight, Tensor());
  return grads;
}

GroupNormGrads group_norm_backward(const Tensor& grad_y_in, const Tensor& x_in, const Tensor& mean_in,
                                   const Tensor& rstd_in, const Tensor& weight_in, bool with_bias_grad) {
  const char* op = "group_norm_backward";
  Tensor grad_y = check_common(op, grad_y_in, x_in);
  WICK_CHECK(x_in.dim() >= 2, op, ": expected x [N, C, *], got ", x_in.describe());
  WICK_CHECK(rstd_in.defined() && rstd_in.dim() == 2 && rstd_in.size(0) == x_in.size(0), op, ": rstd ",
             rstd_in.defined() ? rstd_in.describe() : std::string("undefined"), " should be [N, n_groups] for x ",
             x_in.describe());
  int64_t n = x_in.size(0), channels = x_in.size(1), n_groups = rstd_in.size(1);
  WICK_CHECK(n_groups >= 1 && channels % n_groups == 0, op, ": ", channels, " channels of x ", x_in.describe(),
             " do not split into ", n_groups, " groups");
  int64_t spatial = 1;
  for (int64_t axis = 2; axis < x_in.dim(); ++axis) spatial *= x_in.size(axis);
  WICK_CHECK(channels > 0 && spatial > 0, op, ": empty groups in x ", x_in.describe());
  Tensor mean = check_statistic(op, "mean", mean_in, {n, n_groups}, x_in);
  Tensor rstd = check_statistic(op, "rstd", rstd_in, {n, n_groups}, x_in);
  Tensor weight = weight_in.defined() ? check_statistic(op, "weight", weight_in, {channels}, x_in) : Tensor();
  Tensor x = x_in.contiguous();
  DType stats = statistics_type(x.dtype());
  GroupNormGrads grads;
  grads.grad_x = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (weight.defined()) grads.grad_weight = Tensor::empty({channels}, stats, x.device());
  if (with_bias_grad) grads.grad_bias = Tensor::empty({channels}, stats, x.device());
  NormProblem problem;
  problem.rows = n * n_groups;
  problem.row_size = channels / n_groups * spatial;
  problem.subtract_mean = true;
  problem.groups = n_groups;
  problem.channels_per_group = channels / n_groups;
  problem.inner = spatial;
  run(problem, grad_y, x, mean, rstd, weight, grads.grad_x, grads.grad_weight, grads.grad_bias);
  return grads;
}
}  // namespace wick
