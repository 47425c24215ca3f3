// CUDA 2-d convolution, called by the conv front-end after validation; the device is current.
// No CUDA headers here.
//
//   cuda::conv2d(geometry, DType::BF16, x, weight, bias_or_null, y, stream);
#pragma once

#include "runtime/dtype.h"
#include "runtime/ops/conv_geometry.h"

namespace wick::cuda {

// x [n, c, h, w], weight [o, c / groups, kh, kw], bias [o] (may be null), y [n, o, ho, wo]; all
// contiguous and of one dtype (F32, F64, BF16, F16). With cuDNN (WICK_HAS_CUDNN): the legacy
// cudnnConvolutionForward, f32 accumulation for 16-bit types (tensor cores allowed), FMA math for
// f32 (no TF32); algorithm chosen by cudnnGetConvolutionForwardAlgorithm_v7 and cached per shape.
// Without cuDNN, or where cuDNN offers no suitable algorithm: im2col + cuBLASLt per batch item.
void conv2d(const Conv2dGeometry& geometry, DType dtype, const void* x, const void* weight, const void* bias,
            void* y, void* stream);

}  // namespace wick::cuda
