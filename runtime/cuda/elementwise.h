// CUDA elementwise, fill and activation backward launchers (declarations only; no CUDA headers).
// Same contracts as runtime/cpu/elementwise.h; each takes the stream (a cudaStream_t) last, on the
// current device.
//
//   cuda::unary(UnaryOp::Exp, DType::BF16, x_ptr, x_view, out_ptr, n, stream);
//   cuda::binary(BinaryOp::Add, DType::F32, a_operand, b_operand, out_ptr, n, stream);
//   cuda::fill(DType::F16, out_ptr, 1.0, n, stream);
//   cuda::unary_backward(UnaryOp::Gelu, DType::BF16, grad_ptr, x_ptr, out_ptr, n, stream);
#pragma once

#include <cstdint>

#include "runtime/dtype.h"
#include "runtime/kernel_args.h"
#include "runtime/ops/elementwise_math.h"

namespace wick::cuda {

void unary(UnaryOp op, DType dtype, const void* x, const StridedView& x_view, void* out, int64_t n, void* stream);
void binary(BinaryOp op, DType dtype, const ElementwiseOperand& a, const ElementwiseOperand& b, void* out,
            int64_t n, void* stream);
void where(const ElementwiseOperand& cond, DType dtype, const ElementwiseOperand& a, const ElementwiseOperand& b,
           void* out, int64_t n, void* stream);
void fill(DType dtype, void* out, double value, int64_t n, void* stream);
void arange(DType dtype, void* out, double start, double step, int64_t n, void* stream);

// ---- gradients ----
void unary_backward(UnaryOp op, DType dtype, const void* grad, const void* x, void* out, int64_t n, void* stream);

}  // namespace wick::cuda
