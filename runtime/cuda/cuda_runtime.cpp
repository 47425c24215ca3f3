// The CUDA side of runtime/cuda/cuda_api.h: devices, the stream-ordered caching allocator,
// copies, pinned memory, streams and library versions.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdint>
#include <cstdlib>
#include <mutex>

#include "runtime/cuda/cuda_api.h"
#include "runtime/cuda/host_function.h"
#include "runtime/cuda/cuda_check.h"

#if WICK_HAS_NCCL
#include <nccl.h>
#endif

namespace wick::cuda {
namespace {

std::string version_triplet(int major, int minor, int patch) {
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

// Keep freed blocks in the device's default pool instead of returning them to the driver at
// every synchronization: this is what makes cudaMallocAsync a caching allocator.
void configure_pool_once(int device) {
  static std::once_flag flags[64];
  std::call_once(flags[device % 64], [device] {
    cudaMemPool_t pool;
    CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
    uint64_t threshold = UINT64_MAX;
    CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  });
}

}  // namespace

bool compiled() { return true; }

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver or no device: report zero, clear the sticky error
    return 0;
  }
  return count;
}

CudaDeviceInfo device_info(int device) {
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  CudaDeviceInfo info;
  info.name = prop.name;
  info.compute_major = prop.major;
  info.compute_minor = prop.minor;
  set_device(device);
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  info.free_bytes = static_cast<int64_t>(free_bytes);
  info.total_bytes = static_cast<int64_t>(total_bytes);
  CUDA_CHECK(cudaDriverGetVersion(&info.driver_version));
  CUDA_CHECK(cudaRuntimeGetVersion(&info.runtime_version));
  return info;
}

void set_device(int device) { CUDA_CHECK(cudaSetDevice(device)); }

void* allocate(int device, size_t bytes, void* stream) {
  set_device(device);
  configure_pool_once(device);
  void* data = nullptr;
  cudaError_t status = cudaMallocAsync(&data, bytes, static_cast<cudaStream_t>(stream));
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    WICK_FAIL(Runtime, "out of memory on cuda:", device, " allocating ", bytes, " bytes (",
              free_bytes >> 20, " MiB free of ", total_bytes >> 20, " MiB)");
  }
  CUDA_CHECK(status);
  return data;
}

void free(int device, void* data, void* stream) {
  set_device(device);
  CUDA_CHECK(cudaFreeAsync(data, static_cast<cudaStream_t>(stream)));
}

void copy(void* dst, bool dst_on_device, const void* src, bool src_on_device, size_t bytes, void* stream) {
  cudaMemcpyKind kind = dst_on_device ? (src_on_device ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                                      : (src_on_device ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  auto s = static_cast<cudaStream_t>(stream);
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s));
  // A copy to pageable host memory must be complete before the caller reads it.
  if (!dst_on_device) CUDA_CHECK(cudaStreamSynchronize(s));
}

void* allocate_pinned(size_t bytes, bool* pinned) {
  size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  void* data = nullptr;
  if (device_count() > 0) {
    CUDA_CHECK(cudaHostAlloc(&data, rounded, cudaHostAllocDefault));
    *pinned = true;
    return data;
  }
  *pinned = false;
  data = std::aligned_alloc(64, rounded);
  WICK_CHECK_KIND(Runtime, data != nullptr, "out of host memory allocating ", bytes, " bytes");
  return data;
}

void free_pinned(void* data, bool pinned) {
  if (pinned)
    cudaFreeHost(data);
  else
    std::free(data);
}

void* create_event(int device) {
  set_device(device);
  cudaEvent_t event;
  CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  return event;
}

void destroy_event(int device, void* event) {
  if (!event) return;
  cudaSetDevice(device);
  cudaEventDestroy(static_cast<cudaEvent_t>(event));
}

void record_event(int device, void* event, void* stream) {
  set_device(device);
  CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)));
}

void stream_wait_event(int device, void* stream, void* event) {
  set_device(device);
  CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0));
}

void synchronize_event(int device, void* event) {
  set_device(device);
  CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
}

void* create_stream(int device) {
  set_device(device);
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return stream;
}

void destroy_stream(int device, void* stream) {
  if (!stream) return;
  cudaSetDevice(device);
  cudaStreamDestroy(static_cast<cudaStream_t>(stream));
}

void synchronize_stream(int device, void* stream) {
  set_device(device);
  CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
}

void synchronize_device(int device) {
  set_device(device);
  CUDA_CHECK(cudaDeviceSynchronize());
}

void launch_host_function(int device, void* stream, void (*fn)(void*), void* arg) {
  set_device(device);
  CUDA_CHECK(cudaLaunchHostFunc(static_cast<cudaStream_t>(stream), fn, arg));
}

std::string runtime_version_string() {
  int version = 0;
  if (cudaRuntimeGetVersion(&version) != cudaSuccess) return "";
  return version_triplet(version / 1000, (version % 1000) / 10, version % 10);
}

std::string cublas_version_string() {
  size_t version = cublasLtGetVersion();  // major*10000 + minor*100 + patch
  return version_triplet(static_cast<int>(version / 10000), static_cast<int>((version / 100) % 100),
                         static_cast<int>(version % 100));
}

std::string cudnn_version_string() {
  size_t version = cudnnGetVersion();  // major*10000 + minor*100 + patch for cuDNN 9
  return version_triplet(static_cast<int>(version / 10000), static_cast<int>((version / 100) % 100),
                         static_cast<int>(version % 100));
}

std::string nccl_version_string() {
#if WICK_HAS_NCCL
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) return "";
  return version_triplet(version / 10000, (version / 100) % 100, version % 100);
#else
  return "";
#endif
}

std::string compiled_architectures() { return WICK_CUDA_ARCHITECTURES; }

}  // namespace wick::cuda
