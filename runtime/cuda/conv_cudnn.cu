#include "runtime/cuda/cuda_check.h"

#if WICK_HAS_CUDNN
#include <map>
#include <mutex>

#include "runtime/cuda/conv_cudnn.h"

namespace wick::cuda {

cudnnHandle_t cudnn_handle(int device) {
  static std::mutex mutex;
  static std::map<int, cudnnHandle_t> handles;
  std::lock_guard<std::mutex> lock(mutex);
  auto found = handles.find(device);
  if (found != handles.end()) return found->second;
  cudnnHandle_t handle = nullptr;
  CUDNN_CHECK(cudnnCreate(&handle));
  handles[device] = handle;  // lives for the process
  return handle;
}

cudnnDataType_t cudnn_type(DType dtype) {
  switch (dtype) {
    case DType::F64: return CUDNN_DATA_DOUBLE;
    case DType::BF16: return CUDNN_DATA_BFLOAT16;
    case DType::F16: return CUDNN_DATA_HALF;
    default: return CUDNN_DATA_FLOAT;
  }
}

int cudnn_int(int64_t value, const char* op) {
  WICK_CHECK(value >= 0 && value <= INT32_MAX, op, ": extent ", value, " exceeds cuDNN's int range");
  return static_cast<int>(value);
}

ConvDescriptors make_conv_descriptors(const Conv2dGeometry& g, DType dtype, const char* op) {
  auto i = [op](int64_t value) { return cudnn_int(value, op); };
  ConvDescriptors d;
  cudnnDataType_t type = cudnn_type(dtype);
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&d.x));
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&d.y));
  CUDNN_CHECK(cudnnCreateFilterDescriptor(&d.w));
  CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d.conv));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(d.x, CUDNN_TENSOR_NCHW, type, i(g.n), i(g.c), i(g.h), i(g.w)));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(d.y, CUDNN_TENSOR_NCHW, type, i(g.n), i(g.o), i(g.ho), i(g.wo)));
  CUDNN_CHECK(cudnnSetFilter4dDescriptor(d.w, type, CUDNN_TENSOR_NCHW, i(g.o), i(g.channels_per_group()), i(g.kh),
                                         i(g.kw)));
  cudnnDataType_t compute = dtype == DType::F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  CUDNN_CHECK(cudnnSetConvolution2dDescriptor(d.conv, i(g.ph), i(g.pw), i(g.sh), i(g.sw), i(g.dh), i(g.dw),
                                              CUDNN_CROSS_CORRELATION, compute));
  CUDNN_CHECK(cudnnSetConvolutionGroupCount(d.conv, i(g.groups)));
  bool half = dtype == DType::BF16 || dtype == DType::F16;
  CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, half ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
  return d;
}

}  // namespace wick::cuda
#endif
