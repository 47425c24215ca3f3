// CUDA 2-d convolution and its gradients, called by the conv front-end after validation; the
// device is current. No CUDA headers here (the cuDNN descriptors are in conv_cudnn.h).
//
//   cuda::conv2d(geometry, DType::BF16, x, weight, bias_or_null, y, stream);
//   cuda::conv2d_backward_input(geometry, DType::BF16, grad_y, weight, grad_x, stream);
//   cuda::conv2d_backward_weight(geometry, DType::BF16, grad_y, x, grad_weight, stream);
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

// ---- gradients ----
// Same contracts as the CPU kernels (runtime/cpu/conv.h), for F32, F64, BF16, F16. With
// cuDNN: cudnnConvolutionBackwardData / BackwardFilter, deterministic algorithms only, FMA math
// for f32 (no TF32), f32 accumulation for 16-bit types; algorithms chosen by the _v7 heuristics
// and cached per shape. Without cuDNN, or when it offers no suitable algorithm: per batch item a
// cuBLASLt GEMM with a col2im gather (input) or im2col then an accumulating GEMM (weight; 16-bit
// weight gradients are then rounded to the dtype between items).
void conv2d_backward_input(const Conv2dGeometry& geometry, DType dtype, const void* grad_y, const void* weight,
                           void* grad_x, void* stream);
void conv2d_backward_weight(const Conv2dGeometry& geometry, DType dtype, const void* grad_y, const void* x,
                            void* grad_weight, void* stream);

}  // namespace wick::cuda
