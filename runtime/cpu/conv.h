// CPU 2-d convolution (im2col + OpenBLAS GEMM), called by the conv front-end after validation.
//
//   cpu::conv2d(geometry, DType::F32, x, weight, bias_or_null, y);
#pragma once

#include "runtime/dtype.h"
#include "runtime/ops/conv_geometry.h"

namespace wick::cpu {

// x [n, c, h, w], weight [o, c / groups, kh, kw], bias [o] (may be null), y [n, o, ho, wo]; all
// contiguous, of dtype F32 or F64 (the front-end converts 16-bit types). Batch items run in
// parallel when each item's GEMM is small; otherwise OpenBLAS threads each GEMM.
void conv2d(const Conv2dGeometry& geometry, DType dtype, const void* x, const void* weight, const void* bias,
            void* y);

}  // namespace wick::cpu
