// CPU elementwise, fill and activation backward kernels, called by runtime/ops/elementwise.cpp and
// creation.cpp after validation, promotion, broadcasting (stride 0) and output allocation. Outputs
// are contiguous; inputs are walked through their (coalesced) StridedView.
//
//   cpu::unary(UnaryOp::Exp, DType::BF16, x_ptr, x_view, out_ptr, n);
//   cpu::binary(BinaryOp::Add, DType::F32, a_operand, b_operand, out_ptr, n);   // a, b of `dtype`
//   cpu::fill(DType::F16, out_ptr, 1.0, n);
//   cpu::unary_backward(UnaryOp::Gelu, DType::F32, grad_ptr, x_ptr, out_ptr, n);
#pragma once

#include <cstdint>

#include "runtime/dtype.h"
#include "runtime/kernel_args.h"
#include "runtime/ops/elementwise_math.h"

namespace wick::cpu {

// out[i] = op(x[i]); x and out have `dtype`.
void unary(UnaryOp op, DType dtype, const void* x, const StridedView& x_view, void* out, int64_t n);
// out[i] = op(a[i], b[i]); a and b have `dtype`; out has `dtype`, or u8 for comparisons.
void binary(BinaryOp op, DType dtype, const ElementwiseOperand& a, const ElementwiseOperand& b, void* out,
            int64_t n);
// out[i] = cond[i] != 0 ? a[i] : b[i]; cond is u8 (a tensor operand), a, b and out have `dtype`.
void where(const ElementwiseOperand& cond, DType dtype, const ElementwiseOperand& a, const ElementwiseOperand& b,
           void* out, int64_t n);
// out[i] = value converted to dtype.
void fill(DType dtype, void* out, double value, int64_t n);
// out[i] = start + i * step (computed in double) converted to dtype.
void arange(DType dtype, void* out, double start, double step, int64_t n);

// ---- gradients ----
// out[i] = grad[i] * op'(x[i]); all contiguous, of `dtype` (floating); op Silu, Gelu or GeluTanh.
void unary_backward(UnaryOp op, DType dtype, const void* grad, const void* x, void* out, int64_t n);

}  // namespace wick::cpu
