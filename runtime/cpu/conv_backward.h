// CPU gradients of the 2-d convolution (col2im + GEMM, im2col + GEMM), called by the
// conv_backward front-end after validation.
//
//   cpu::conv2d_backward_input(geometry, DType::F32, grad_y, weight, grad_x);
//   cpu::conv2d_backward_weight(geometry, DType::F32, grad_y, x, grad_weight);
#pragma once

#include "runtime/dtype.h"
#include "runtime/ops/conv_geometry.h"

namespace wick::cpu {

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
