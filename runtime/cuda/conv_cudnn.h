// What the cuDNN convolution paths (forward and backward, in conv.cu) share: one cuDNN handle per
// device, dtype mapping, and the four descriptors of a 2-d convolution.
// Include only from CUDA translation units built with WICK_HAS_CUDNN.
//
//   cudnnHandle_t handle = cudnn_handle(device);   CUDNN_CHECK(cudnnSetStream(handle, stream));
//   ConvDescriptors d = make_conv_descriptors(geometry, DType::BF16, "conv2d");
#pragma once

#include <cudnn.h>

#include "runtime/dtype.h"
#include "runtime/ops/conv_geometry.h"

namespace wick::cuda {

// The process-wide handle of `device`, created on first use (thread-safe); never destroyed.
cudnnHandle_t cudnn_handle(int device);
cudnnDataType_t cudnn_type(DType dtype);
// Checks that an extent fits cuDNN's int; the message names `op`.
int cudnn_int(int64_t value, const char* op);

// x [N, C, H, W], y [N, O, Ho, Wo], w [O, C/groups, kh, kw] and the convolution (cross-correlation,
// f32 accumulation — f64 for F64 — groups set; tensor-op math for 16-bit types, FMA math for f32
// so f32 stays exact f32 rather than TF32). Owned by the caller's plan cache for the process.
struct ConvDescriptors {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
};
ConvDescriptors make_conv_descriptors(const Conv2dGeometry& g, DType dtype, const char* op);

}  // namespace wick::cuda
