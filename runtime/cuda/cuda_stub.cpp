// Built when wick has no CUDA: allocation on a CUDA device fails with a clear message; queries
// answer "none". Host memory stands in for pinned memory. Every kernel launcher of runtime/cuda/
// is defined here too and throws "built without CUDA", so the op front-ends (runtime/ops/) call
// them with no #if: a CUDA tensor cannot exist in this build, so none of them is ever reached.
#include <cstdlib>

#include "runtime/cuda/attention.h"
#include "runtime/cuda/conv.h"
#include "runtime/cuda/copy.h"
#include "runtime/cuda/cuda_api.h"
#include "runtime/cuda/elementwise.h"
#include "runtime/cuda/float8.h"
#include "runtime/cuda/host_function.h"
#include "runtime/cuda/index.h"
#include "runtime/cuda/matmul.h"
#include "runtime/cuda/norm.h"
#include "runtime/cuda/random.h"
#include "runtime/cuda/reduce.h"
#include "runtime/cuda/rope.h"
#include "runtime/cuda/softmax.h"
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

// ---- kernel launchers, by family ----

// attention
void attention_forward(DType, const void*, const void*, const void*, const void*, DType, const AttentionDims&, bool,
                       double, void*, void*, void*) {
  no_cuda("attention_forward");
}
bool cudnn_attention_compiled() { return false; }
bool attention_forward_cudnn(int, DType, const void*, const void*, const void*, const AttentionDims&, bool, float,
                             void*, float*, void*) {
  no_cuda("attention_forward_cudnn");
}
void attention_backward(DType, const void*, const void*, const void*, const void*, const void*, const void*,
                        const void*, DType, const AttentionBackwardDims&, bool, double, void*, void*, void*, void*,
                        void*) {
  no_cuda("attention_backward");
}
bool attention_backward_cudnn(int, DType, const void*, const void*, const void*, const void*, const void*,
                              const float*, const AttentionBackwardDims&, bool, float, void*, void*, void*, void*) {
  no_cuda("attention_backward_cudnn");
}

// conv
void conv2d(const Conv2dGeometry&, DType, const void*, const void*, const void*, void*, void*) { no_cuda("conv2d"); }
void conv2d_backward_input(const Conv2dGeometry&, DType, const void*, const void*, void*, void*) {
  no_cuda("conv2d_backward_input");
}
void conv2d_backward_weight(const Conv2dGeometry&, DType, const void*, const void*, void*, void*) {
  no_cuda("conv2d_backward_weight");
}

// copy
void copy_strided(void*, DType, const StridedView&, const void*, DType, const StridedView&, int64_t, void*) {
  no_cuda("copy_strided");
}

// elementwise
void unary(UnaryOp, DType, const void*, const StridedView&, void*, int64_t, void*) { no_cuda("unary"); }
void binary(BinaryOp, DType, const ElementwiseOperand&, const ElementwiseOperand&, void*, int64_t, void*) {
  no_cuda("binary");
}
void where(const ElementwiseOperand&, DType, const ElementwiseOperand&, const ElementwiseOperand&, void*, int64_t,
           void*) {
  no_cuda("where");
}
void fill(DType, void*, double, int64_t, void*) { no_cuda("fill"); }
void arange(DType, void*, double, double, int64_t, void*) { no_cuda("arange"); }
void unary_backward(UnaryOp, DType, const void*, const void*, void*, int64_t, void*) { no_cuda("unary_backward"); }

// float8
void row_absmax(float*, const void*, DType, int64_t, int64_t, void*) { no_cuda("row_absmax"); }
void quantize_float8(uint8_t*, const float*, const void*, DType, int64_t, int64_t, bool, void*) {
  no_cuda("quantize_float8");
}
void dequantize_float8(void*, DType, const uint8_t*, const float*, int64_t, int64_t, bool, void*) {
  no_cuda("dequantize_float8");
}

// index
void index_select(void*, const void*, int, const int64_t*, int64_t, int64_t, int64_t, int64_t, void*) {
  no_cuda("index_select");
}
void gather(void*, const void*, int, const StridedView&, int64_t, int64_t, const int64_t*, int64_t, void*) {
  no_cuda("gather");
}
void scatter_add(void*, DType, const StridedView&, int64_t, int64_t, const int64_t*, const void*, const StridedView&,
                 int64_t, void*) {
  no_cuda("scatter_add");
}
void index_add(void*, DType, const void*, const int64_t*, int64_t, int64_t, int64_t, int64_t, void*) {
  no_cuda("index_add");
}

// matmul
void gemm(const GemmProblem&, void*) { no_cuda("gemm"); }

// norm
void normalize_rows(const NormProblem&, DType, const void*, const void*, const void*, void*, void*, void*, void*) {
  no_cuda("normalize_rows");
}
void normalize_rows_backward(const NormProblem&, DType, const void*, const void*, const void*, const void*,
                             const void*, void*, void*, void*, void*) {
  no_cuda("normalize_rows_backward");
}

// random
void fill_random(void*, DType, int64_t, const RngStream&, uint64_t, RandomDistribution, float, float, void*) {
  no_cuda("fill_random");
}

// reduce
int64_t reduce_workspace_bytes(ReduceOp, int64_t, int64_t) { no_cuda("reduce_workspace_bytes"); }
void reduce_rows(ReduceOp, DType, const void*, void*, int64_t, int64_t, double, void*, void*) {
  no_cuda("reduce_rows");
}
bool reduce_rows_split(ReduceOp, DType, const void*, void*, int64_t, int64_t, double, void*, void*) {
  no_cuda("reduce_rows_split");
}

// rope
void apply_rope(void*, const void*, DType, const StridedView&, int64_t, const void*, const void*,
                const StridedView&, int64_t, void*) {
  no_cuda("apply_rope");
}

// softmax
void softmax_rows(bool, DType, const void*, void*, int64_t, int64_t, void*) { no_cuda("softmax_rows"); }
void softmax_backward_rows(DType, const void*, const void*, void*, int64_t, int64_t, void*) {
  no_cuda("softmax_backward_rows");
}

}  // namespace wick::cuda
