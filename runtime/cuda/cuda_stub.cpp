// Built when wick has no CUDA: allocation on a CUDA device fails with a clear message; queries
// answer "none". Host memory stands in for pinned memory.
#include <cstdlib>

#include "runtime/cuda/cuda_api.h"
#include "runtime/cuda/host_function.h"
#include "runtime/error.h"

namespace wick::cuda {
namespace {
[[noreturn]] void no_cuda(const char* what) {
  WICK_FAIL(Usage, what, ": this wick was built without CUDA (configure with -DWICK_CUDA=ON on a "
                         "machine with the CUDA toolkit)");
}
}  // namespace

bool compiled() { return false; }
int device_count() { return 0; }
CudaDeviceInfo device_info(int) { no_cuda("cuda device info"); }
void set_device(int) { no_cuda("cuda set_device"); }
void* allocate(int, size_t, void*) { no_cuda("allocating on a CUDA device"); }
void free(int, void*, void*) { no_cuda("freeing CUDA memory"); }
void copy(void*, bool, const void*, bool, size_t, void*) { no_cuda("copying to or from a CUDA device"); }
void* allocate_pinned(size_t bytes, bool* pinned) {
  *pinned = false;
  void* data = std::aligned_alloc(64, (std::max<size_t>(bytes, 1) + 63) / 64 * 64);
  WICK_CHECK_KIND(Runtime, data != nullptr, "out of host memory allocating ", bytes, " pinned bytes");
  return data;
}
void free_pinned(void* data, bool) { std::free(data); }
void* create_event(int) { no_cuda("creating a CUDA event"); }
void destroy_event(int, void*) {}
void record_event(int, void*, void*) { no_cuda("recording a CUDA event"); }
void stream_wait_event(int, void*, void*) { no_cuda("waiting for a CUDA event"); }
void synchronize_event(int, void*) {}
void* create_stream(int) { no_cuda("creating a CUDA stream"); }
void destroy_stream(int, void*) {}
void synchronize_stream(int, void*) {}
void synchronize_device(int) {}
void launch_host_function(int, void*, void (*)(void*), void*) { no_cuda("queueing a host function on a CUDA stream"); }
std::string runtime_version_string() { return ""; }
std::string cublas_version_string() { return ""; }
std::string cudnn_version_string() { return ""; }
std::string nccl_version_string() { return ""; }
std::string compiled_architectures() { return ""; }

}  // namespace wick::cuda
