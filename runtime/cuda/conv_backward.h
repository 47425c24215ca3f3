// CUDA gradients of the 2-d convolution, called by the conv_backward front-end after validation;
// the device is current. No CUDA headers here.
//
//   cuda::conv2d_backward_input(geometry, DType::BF16, grad_y, weight, grad_x, stream);
//   cuda::conv2d_backward_weight(geometry, DType::BF16, grad_y, x, grad_weight, stream);
#pragma once

#include "runtime/dtype.h"
#include "runtime/ops/conv_geometry.h"

namespace wick::cuda {

// Same contracts as the CPU kernels (runtime/cpu/conv_backward.h), for F32, F64, BF16, F16. With
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
