// The CUDA runtime as the rest of wick sees it: plain C++ signatures, no CUDA headers.
// Implemented in cuda_runtime.cpp when wick is built with CUDA, in cuda_stub.cpp otherwise
// (where every call that needs a GPU throws "built without CUDA").
//
//   void* p = cuda::allocate(0, bytes, stream);   cuda::free(0, p, stream);
//   cuda::copy(dst, true, src, false, bytes, stream);   // host -> device
#pragma once

#include <cstddef>
#include <string>

#include "runtime/device.h"

namespace wick::cuda {

bool compiled();
int device_count();
CudaDeviceInfo device_info(int device);
// Makes `device` current on this thread (cudaSetDevice).
void set_device(int device);

void* allocate(int device, size_t bytes, void* stream);
void free(int device, void* data, void* stream);
void copy(void* dst, bool dst_on_device, const void* src, bool src_on_device, size_t bytes, void* stream);
// Page-locked host memory; falls back to ordinary aligned memory (pinned = false) where no GPU
// driver is present. free_pinned must be told which kind it frees.
void* allocate_pinned(size_t bytes, bool* pinned);
void free_pinned(void* data, bool pinned);

// Events without timing: recorded on a stream; a stream (or the host) waits for the work before them.
void* create_event(int device);
void destroy_event(int device, void* event);
void record_event(int device, void* event, void* stream);
void stream_wait_event(int device, void* stream, void* event);
void synchronize_event(int device, void* event);

void* create_stream(int device);
void destroy_stream(int device, void* stream);
void synchronize_stream(int device, void* stream);
void synchronize_device(int device);

// Library versions as "major.minor.patch", or "" where the library is not linked.
std::string runtime_version_string();
std::string cublas_version_string();
std::string cudnn_version_string();
std::string nccl_version_string();
// The CUDA architectures compiled in, e.g. "80,90".
std::string compiled_architectures();

}  // namespace wick::cuda
