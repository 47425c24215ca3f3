// CPU 2-d convolution (im2col + OpenBLAS GEMM) and its gradients (col2im + GEMM, im2col + GEMM),
// called by the conv front-end after validation.
//
//   cpu::conv2d(geometry, DType::F32, x, weight, bias_or_null, y);
//   cpu::conv2d_backward_input(geometry, DType::F32, grad_y, weight, grad_x);
//   cpu::conv2d_backward_weight(geometry, DType::F32, grad_y, x, grad_weight);
#pragma once

#include "runtime/dtype.h"
#include "runtime/ops/conv_geometry.h"

namespace wick::cpu {

// x [n, c, h, w], weight [o, c / groups, kh, kw], bias [o] (may be null), y [n, o, ho, wo]; all
// contiguous, of dtype F32 or F64 (the front-end converts 16-bit types). Batch items run in
// parallel when each item's GEMM is small; otherwise OpenBLAS threads each GEMM.
void conv2d(const Conv2dGeometry& geometry, DType dtype, const void* x, const void* weight, const void* bias,
            void* y);

// ---- gradients ----
// grad_y [n, o, ho, wo], weight [o, c / groups, kh, kw] -> grad_x [n, c, h, w] (overwritten); all
// contiguous, F32 or F64. Per item and group: columns = weight_g^T @ grad_y_g, then col2im.
void conv2d_backward_input(const Conv2dGeometry& geometry, DType dtype, const void* grad_y, const void* weight,
                           void* grad_x);
// grad_y [n, o, ho, wo], x [n, c, h, w] -> grad_weight [o, c / groups, kh, kw] (overwritten); all
// contiguous, F32 or F64. Per item and group: grad_weight_g += grad_y_g @ im2col(x)_g^T, items in
// order (deterministic).
void conv2d_backward_weight(const Conv2dGeometry& geometry, DType dtype, const void* grad_y, const void* x,
                            void* grad_weight);

}  // namespace wick::cpu
