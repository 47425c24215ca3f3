#include "runtime/ops/matmul.h"

#include "runtime/cpu/matmul.h"
#include "runtime/cuda/cuda_api.h"
#include "runtime/cuda/matmul.h"
#include "runtime/ops/copy.h"
#include "runtime/ops/gemm_problem.h"

namespace wick {
namespace {

MatrixLayout layout_of(const Tensor& x) {
  int64_t rank = x.dim();
  return matrix_layout(x.size(rank - 2), x.size(rank - 1), x.strides()[rank - 2], x.strides()[rank - 1]);
}

// The operand itself when BLAS can read its last two axes in place, else a contiguous copy.
Tensor blas_ready(const Tensor& x) { return layout_of(x).usable ? x : x.contiguous(); }

Shape batch_of(const Tensor& x) { return Shape(x.shape().begin(), x.shape().end() - 2); }

Strides batch_strides_of(const Tensor& x) { return Strides(x.strides().begin(), x.strides().end() - 2); }

void run_gemm(const GemmProblem& problem, Device device) {
  if (device.is_cpu()) {
    cpu::gemm(problem);
    return;
  }
  cuda::set_device(device.index);
  cuda::gemm(problem, current_stream(device).handle);
}

// a [B..., M, K], b [B..., K, N] (batch already broadcast, same dtype) into out [B..., M, N];
// adds to out's contents when `accumulate`, or to the row `bias_row` (CPU; see GemmProblem::bias).
void batched_gemm(const Tensor& a, const Tensor& b, const Tensor& out, bool accumulate,
                  const void* bias_row = nullptr) {
  int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  if (out.numel() == 0) return;
  if (k == 0) {
    WICK_CHECK(bias_row == nullptr, "matmul: an empty inner axis with a bias row");
    if (!accumulate) copy_into(out, Tensor::scalar(0.0, out.dtype(), out.device()));
    return;
  }
  MatrixLayout a_layout = layout_of(a), b_layout = layout_of(b);
  GemmProblem problem;
  problem.dtype = out.dtype();
  problem.m = m;
  problem.n = n;
  problem.k = k;
  problem.a = a.data();
  problem.a_transposed = a_layout.transposed;
  problem.lda = a_layout.ld;
  problem.b = b.data();
  problem.b_transposed = b_layout.transposed;
  problem.ldb = b_layout.ld;
  problem.c = out.data();
  problem.ldc = n;
  problem.accumulate = accumulate;
  problem.bias = bias_row;
  Shape batch = batch_of(out);
  Strides a_strides = batch_strides_of(a), b_strides = batch_strides_of(b), c_strides = batch_strides_of(out);
  problem.n_batch = numel(batch);
  coalesce_axes(batch, {&a_strides, &b_strides, &c_strides});
  problem.a_batch = make_strided_view(batch, a_strides, "matmul");
  problem.b_batch = make_strided_view(batch, b_strides, "matmul");
  problem.c_batch = make_strided_view(batch, c_strides, "matmul");
  run_gemm(problem, out.device());
}

// matmul, plus `bias` (broadcast to the result, may be undefined) added by the GEMM itself.
Tensor matmul_plus(const Tensor& a_in, const Tensor& b_in, const Tensor& bias) {
  WICK_CHECK(a_in.defined() && b_in.defined(), "matmul: undefined tensor");
  WICK_CHECK(a_in.dim() >= 1 && b_in.dim() >= 1, "matmul: both operands need at least 1 axis, got ",
             a_in.describe(), " and ", b_in.describe());
  WICK_CHECK(is_floating(a_in.dtype()) && is_floating(b_in.dtype()), "matmul: floating dtypes only, got ",
             a_in.describe(), " and ", b_in.describe());
  WICK_CHECK(a_in.device() == b_in.device(), "matmul: operands on different devices: ", a_in.describe(), " and ",
             b_in.describe());
  int64_t b_inner = b_in.size(b_in.dim() == 1 ? 0 : -2);
  WICK_CHECK(a_in.size(-1) == b_inner, "matmul: inner dimensions differ: ", a_in.describe(), " @ ", b_in.describe(),
             " (", a_in.size(-1), " vs ", b_inner, ")");
  // One shared matrix under a batch of contiguous rows (grad_x = g @ W of a linear layer): one GEMM over
  // all the rows instead of one small GEMM per batch index; every output element is the same sum.
  if (b_in.dim() == 2 && a_in.dim() > 2 && a_in.is_contiguous()) {
    Shape out_shape = a_in.shape();
    out_shape.back() = b_in.size(1);
    return matmul_plus(a_in.reshape({-1, a_in.size(-1)}), b_in, bias).view(out_shape);
  }
  DType dtype = promote_types(a_in.dtype(), b_in.dtype());
  Device device = a_in.device();
  bool vector_a = a_in.dim() == 1, vector_b = b_in.dim() == 1;
  Tensor a = vector_a ? a_in.unsqueeze(0) : a_in;
  Tensor b = vector_b ? b_in.unsqueeze(1) : b_in;
  int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  Shape batch = broadcast_shapes(batch_of(a), batch_of(b), "matmul");
  Shape out_shape = batch;
  out_shape.push_back(m);
  out_shape.push_back(n);

  // The CPU multiplies 16-bit operands in f32; the GPU multiplies them natively.
  DType compute = dtype;
  if (device.is_cpu() && (dtype == DType::BF16 || dtype == DType::F16)) compute = DType::F32;
  a = a.dtype() == compute ? blas_ready(a) : cast(a, compute);
  b = b.dtype() == compute ? blas_ready(b) : cast(b, compute);
  Shape a_shape = batch, b_shape = batch;
  a_shape.insert(a_shape.end(), {m, k});
  b_shape.insert(b_shape.end(), {k, n});
  Tensor out = Tensor::empty(out_shape, compute, device);
  // The CPU adds a linear layer's bias row as it writes C; anything else is broadcast into C first.
  bool bias_row = bias.defined() && device.is_cpu() && k > 0 && bias.dim() == 1 && bias.size(0) == n &&
                  bias.dtype() == compute && bias.is_contiguous();
  if (bias.defined() && !bias_row) copy_into(out, bias);
  batched_gemm(a.expand(a_shape), b.expand(b_shape), out, bias.defined() && !bias_row,
               bias_row ? bias.data() : nullptr);
  if (compute != dtype) out = cast(out, dtype);

  if (vector_a) out = out.squeeze(out.dim() - 2);
  if (vector_b) out = out.squeeze(out.dim() - 1);
  return out;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) { return matmul_plus(a, b, Tensor()); }

Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b) {
  WICK_CHECK(a.defined() && b.defined(), "matmul: undefined tensor");
  WICK_CHECK(!transpose_a || a.dim() >= 2, "matmul: transpose_a needs at least 2 axes, got ", a.describe());
  WICK_CHECK(!transpose_b || b.dim() >= 2, "matmul: transpose_b needs at least 2 axes, got ", b.describe());
  return matmul(transpose_a ? a.transpose(-2, -1) : a, transpose_b ? b.transpose(-2, -1) : b);
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  WICK_CHECK(x.defined() && weight.defined(), "linear: undefined tensor");
  WICK_CHECK(x.dim() >= 1 && weight.dim() == 2, "linear: expected x [..., in] and weight [out, in], got ",
             x.describe(), " and ", weight.describe());
  WICK_CHECK(is_floating(x.dtype()) && is_floating(weight.dtype()), "linear: floating dtypes only, got ",
             x.describe(), " and ", weight.describe());
  WICK_CHECK(x.size(-1) == weight.size(1), "linear: x ", x.describe(), " has ", x.size(-1),
             " input features but weight ", weight.describe(), " expects ", weight.size(1));
  WICK_CHECK(x.device() == weight.device(), "linear: x ", x.describe(), " and weight ", weight.describe(),
             " on different devices");
  if (bias.defined()) {
    WICK_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), "linear: bias ", bias.describe(),
               " does not match weight ", weight.describe());
    WICK_CHECK(bias.device() == x.device(), "linear: bias ", bias.describe(), " on a different device than x ",
               x.describe());
    WICK_CHECK(is_floating(bias.dtype()), "linear: floating dtypes only, got bias ", bias.describe());
  }
  Tensor w = weight.dtype() == x.dtype() ? weight : cast(weight, x.dtype());
  Tensor b = !bias.defined() || bias.dtype() == x.dtype() ? bias : cast(bias, x.dtype());
  // Flatten the leading axes so the product is one GEMM (a view when x allows it).
  Shape out_shape = x.shape();
  out_shape.back() = weight.size(0);
  Tensor x2 = x.dim() == 1 ? x.unsqueeze(0) : x.reshape({-1, x.size(-1)});
  return matmul_plus(x2, w.transpose(0, 1), b).view(out_shape);
}

}  // namespace wick
