#include "runtime/ops/reduce.h"

#include <limits>

#include "runtime/cpu/reduce.h"
#include "runtime/cuda/cuda_api.h"
#include "runtime/cuda/reduce.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/reduce_math.h"

namespace wick {
namespace {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Mean: return "mean";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
    case ReduceOp::ArgMax: return "argmax";
    case ReduceOp::Var: return "var";
    case ReduceOp::LogSumExp: return "logsumexp";
  }
  return "reduce";
}

// x with its reduced axes moved last (kept axes in order first), contiguous, and the shapes.
struct ReducePlan {
  Tensor rows;          // contiguous, viewed as [n_rows, row_length]
  int64_t n_rows = 1, row_length = 1;
  Shape out_shape;
};

ReducePlan plan_reduce(const Tensor& x, const std::vector<int64_t>& axes, bool keepdim, const char* op) {
  WICK_CHECK(x.defined(), op, ": undefined tensor");
  int64_t rank = x.dim();
  std::vector<bool> reduced(static_cast<size_t>(rank), axes.empty());
  for (int64_t axis : axes) {
    WICK_CHECK(axis >= -std::max<int64_t>(rank, 1) && axis < std::max<int64_t>(rank, 1), op, ": axis ", axis,
               " is out of range for ", x.describe(), " (rank ", rank, ")");
    if (rank == 0) continue;  // a 0-d tensor: axis 0 / -1 name the single element
    int64_t a = normalize_axis(axis, rank, op);
    WICK_CHECK(!reduced[static_cast<size_t>(a)], op, ": axis ", axis, " appears twice in the axes list");
    reduced[static_cast<size_t>(a)] = true;
  }
  ReducePlan plan;
  std::vector<int64_t> order;
  for (int64_t a = 0; a < rank; ++a) {
    bool is_reduced = reduced[static_cast<size_t>(a)];
    if (!is_reduced) {
      order.push_back(a);
      plan.n_rows *= x.shape()[a];
    }
    if (!is_reduced || keepdim) plan.out_shape.push_back(is_reduced ? 1 : x.shape()[a]);
  }
  for (int64_t a = 0; a < rank; ++a)
    if (reduced[static_cast<size_t>(a)]) {
      order.push_back(a);
      plan.row_length *= x.shape()[a];
    }
  plan.rows = x.permute(order).contiguous();
  return plan;
}

// A CPU sum/mean of a contiguous floating tensor over one run of axes followed by kept axes: summed in
// place as [outer, mid, inner] (cpu::sum_middle) instead of copying the reduced axes last. Undefined
// when the layout does not fit.
Tensor sum_middle_axes(ReduceOp op, const Tensor& x, const std::vector<int64_t>& axes, bool keepdim) {
  if ((op != ReduceOp::Sum && op != ReduceOp::Mean) || !x.device().is_cpu() || !is_floating(x.dtype()) ||
      !x.is_contiguous() || axes.empty() || x.dim() == 0 || x.numel() == 0)
    return Tensor();
  const int64_t rank = x.dim();
  std::vector<bool> reduced(static_cast<size_t>(rank), false);
  for (int64_t axis : axes) {
    if (axis < -rank || axis >= rank) return Tensor();  // plan_reduce reports it
    int64_t a = axis < 0 ? axis + rank : axis;
    if (reduced[static_cast<size_t>(a)]) return Tensor();
    reduced[static_cast<size_t>(a)] = true;
  }
  int64_t first = 0;
  while (!reduced[static_cast<size_t>(first)]) ++first;
  int64_t last = first;
  while (last < rank && reduced[static_cast<size_t>(last)]) ++last;
  for (int64_t a = last; a < rank; ++a)
    if (reduced[static_cast<size_t>(a)]) return Tensor();  // not one run of axes
  int64_t outer = 1, mid = 1, inner = 1;
  Shape out_shape;
  for (int64_t a = 0; a < rank; ++a) {
    const int64_t extent = x.shape()[a];
    (a < first ? outer : a < last ? mid : inner) *= extent;
    if (a < first || a >= last || keepdim) out_shape.push_back(a < first || a >= last ? extent : 1);
  }
  if (inner == 1) return Tensor();  // the rows are contiguous already
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.device());
  cpu::sum_middle(x.dtype(), x.data(), out.data(), outer, mid, inner, op == ReduceOp::Mean);
  return out;
}

Tensor reduce(ReduceOp op, const Tensor& x, const std::vector<int64_t>& axes, bool keepdim, double correction) {
  const char* name = reduce_op_name(op);
  if (Tensor out = sum_middle_axes(op, x, axes, keepdim); out.defined()) return out;
  ReducePlan plan = plan_reduce(x, axes, keepdim, name);
  bool float_only = op == ReduceOp::Mean || op == ReduceOp::Var || op == ReduceOp::LogSumExp;
  WICK_CHECK(!float_only || is_floating(x.dtype()), name, ": expected a floating-point tensor, got ", x.describe(),
             " (dtype ", dtype_name(x.dtype()), ")");
  DType out_dtype = x.dtype();
  if (op == ReduceOp::ArgMax || (op == ReduceOp::Sum && is_integral(x.dtype()))) out_dtype = DType::I64;
  if (plan.row_length == 0) {
    WICK_CHECK(op != ReduceOp::Max && op != ReduceOp::Min && op != ReduceOp::ArgMax, name, ": cannot reduce ",
               x.describe(), " over an empty axis");
    double value = op == ReduceOp::Sum         ? 0.0
                   : op == ReduceOp::LogSumExp ? -std::numeric_limits<double>::infinity()
                                               : std::numeric_limits<double>::quiet_NaN();
    return full(plan.out_shape, value, out_dtype, x.device());
  }
  Tensor out = Tensor::empty(plan.out_shape, out_dtype, x.device());
  if (plan.n_rows == 0) return out;
  Device device = x.device();
  if (device.is_cpu()) {
    cpu::reduce_rows(op, x.dtype(), plan.rows.data(), out.data(), plan.n_rows, plan.row_length, correction);
  } else {
    cuda::set_device(device.index);
    int64_t workspace_bytes = cuda::reduce_workspace_bytes(op, plan.n_rows, plan.row_length);
    Tensor workspace = workspace_bytes > 0 ? Tensor::empty({workspace_bytes}, DType::U8, device) : Tensor();
    cuda::reduce_rows(op, x.dtype(), plan.rows.data(), out.data(), plan.n_rows, plan.row_length, correction,
                      workspace.defined() ? workspace.data() : nullptr, current_stream(device).handle);
  }
  return out;
}

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int64_t>& axes, bool keepdim) {
  return reduce(ReduceOp::Sum, x, axes, keepdim, 0.0);
}
Tensor mean(const Tensor& x, const std::vector<int64_t>& axes, bool keepdim) {
  return reduce(ReduceOp::Mean, x, axes, keepdim, 0.0);
}
Tensor max(const Tensor& x, const std::vector<int64_t>& axes, bool keepdim) {
  return reduce(ReduceOp::Max, x, axes, keepdim, 0.0);
}
Tensor min(const Tensor& x, const std::vector<int64_t>& axes, bool keepdim) {
  return reduce(ReduceOp::Min, x, axes, keepdim, 0.0);
}
Tensor argmax(const Tensor& x, const std::vector<int64_t>& axes, bool keepdim) {
  return reduce(ReduceOp::ArgMax, x, axes, keepdim, 0.0);
}
Tensor var(const Tensor& x, const std::vector<int64_t>& axes, bool keepdim, double correction) {
  return reduce(ReduceOp::Var, x, axes, keepdim, correction);
}
Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& axes, bool keepdim) {
  return reduce(ReduceOp::LogSumExp, x, axes, keepdim, 0.0);
}

}  // namespace wick
