// cuBLASLt GEMM. Row-major C = A B is computed as the column-major product C^T = B^T A^T: the
// column-major view of a row-major matrix is its transpose, so no data moves.
#include "runtime/cuda/matmul.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "runtime/cuda/cuda_check.h"
#include "runtime/memory.h"

namespace wick::cuda {
namespace {

constexpr size_t workspace_bytes = size_t{32} << 20;

cublasLtHandle_t handle_for(int device) {
  static std::mutex mutex;
  static std::map<int, cublasLtHandle_t> handles;
  std::lock_guard<std::mutex> lock(mutex);
  auto found = handles.find(device);
  if (found != handles.end()) return found->second;
  cublasLtHandle_t handle = nullptr;
  CUBLAS_CHECK(cublasLtCreate(&handle));
  handles[device] = handle;  // lives for the process
  return handle;
}

// One workspace per (device, stream) so concurrent streams never share scratch memory. Kept for
// the life of the process.
void* workspace_for(int device, void* stream) {
  static std::mutex mutex;
  static std::map<std::pair<int, void*>, void*> workspaces;
  std::lock_guard<std::mutex> lock(mutex);
  auto key = std::make_pair(device, stream);
  auto found = workspaces.find(key);
  if (found != workspaces.end()) return found->second;
  Device where = Device::cuda(device);
  void* data = allocate_bytes(where, workspace_bytes, Stream{where, stream});
  workspaces[key] = data;
  return data;
}

// Largest power of two (up to 256) dividing the address and, for a strided batch, the byte
// stride between matrices: every matrix of the batch is at least that aligned. cuBLASLt picks
// kernels (vector widths) by this alignment.
int alignment_of(const void* pointer, int64_t batch, int64_t stride_elements, int element_size) {
  auto bits = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(pointer));
  if (batch > 1) bits |= static_cast<uint64_t>(stride_elements) * static_cast<uint64_t>(element_size);
  int alignment = 256;
  while (alignment > 1 && bits % static_cast<uint64_t>(alignment) != 0) alignment /= 2;
  return alignment;
}

using PlanKey = std::tuple<int, int, int64_t, int64_t, int64_t, bool, bool, int64_t, int64_t, int64_t, int64_t,
                           int64_t, int64_t, int64_t, int, int, int>;

struct Plan {
  cublasLtMatmulDesc_t operation = nullptr;
  cublasLtMatrixLayout_t a_layout = nullptr, b_layout = nullptr, c_layout = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

cudaDataType_t data_type(DType dtype) {
  switch (dtype) {
    case DType::F64: return CUDA_R_64F;
    case DType::BF16: return CUDA_R_16BF;
    case DType::F16: return CUDA_R_16F;
    default: return CUDA_R_32F;
  }
}

cublasLtMatrixLayout_t make_layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                                   int64_t batch_stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, type, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld));
  if (batch > 1) {
    int32_t count = static_cast<int32_t>(batch);
    CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &batch_stride,
                                                  sizeof(batch_stride)));
  }
  return layout;
}

// Column-major problem: C'(n x m) = op(B') op(A') where B' is B's storage (the "A" of cuBLASLt)
// and A' is A's storage.
Plan make_plan(cublasLtHandle_t handle, const GemmProblem& p, int64_t batch, int64_t a_stride, int64_t b_stride,
               int64_t c_stride, int align_a, int align_b, int align_c) {
  Plan plan;
  cudaDataType_t type = data_type(p.dtype);
  bool is_f64 = p.dtype == DType::F64;
  cublasComputeType_t compute = is_f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
  cudaDataType_t scale = is_f64 ? CUDA_R_64F : CUDA_R_32F;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.operation, compute, scale));
  cublasOperation_t op_first = p.b_transposed ? CUBLAS_OP_T : CUBLAS_OP_N;   // applied to B's storage
  cublasOperation_t op_second = p.a_transposed ? CUBLAS_OP_T : CUBLAS_OP_N;  // applied to A's storage
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second)));
  // Stored shapes (before op): B row-major k x n is column-major n x k; transposed it is k x n.
  plan.a_layout = p.b_transposed ? make_layout(type, p.k, p.n, p.ldb, batch, b_stride)
                                 : make_layout(type, p.n, p.k, p.ldb, batch, b_stride);
  plan.b_layout = p.a_transposed ? make_layout(type, p.m, p.k, p.lda, batch, a_stride)
                                 : make_layout(type, p.k, p.m, p.lda, batch, a_stride);
  plan.c_layout = make_layout(type, p.n, p.m, p.ldc, batch, c_stride);

  cublasLtMatmulPreference_t preference = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  uint64_t max_workspace = workspace_bytes;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &max_workspace, sizeof(max_workspace)));
  uint32_t alignments[4] = {static_cast<uint32_t>(align_b), static_cast<uint32_t>(align_a),
                            static_cast<uint32_t>(align_c), static_cast<uint32_t>(align_c)};
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                    &alignments[0], sizeof(uint32_t)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                    &alignments[1], sizeof(uint32_t)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                    &alignments[2], sizeof(uint32_t)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                    &alignments[3], sizeof(uint32_t)));
  cublasLtMatmulHeuristicResult_t result{};
  int n_results = 0;
  cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle, plan.operation, plan.a_layout, plan.b_layout,
                                                          plan.c_layout, plan.c_layout, preference, 1, &result,
                                                          &n_results);
  cublasLtMatmulPreferenceDestroy(preference);
  if (status != CUBLAS_STATUS_SUCCESS || n_results == 0)
    WICK_FAIL(Runtime, "matmul: cuBLASLt found no algorithm for ", dtype_name(p.dtype), " m=", p.m, " n=", p.n,
              " k=", p.k, " batch=", batch, " (status ", static_cast<int>(status), ")");
  plan.algo = result.algo;
  return plan;
}

const Plan& plan_for(int device, cublasLtHandle_t handle, const GemmProblem& p, int64_t batch, int64_t a_stride,
                     int64_t b_stride, int64_t c_stride, int align_a, int align_b, int align_c) {
  static std::mutex mutex;
  static std::map<PlanKey, Plan> plans;  // descriptors live for the process
  PlanKey key{device,   static_cast<int>(p.dtype), p.m, p.n, p.k, p.a_transposed, p.b_transposed, p.lda, p.ldb,
              p.ldc,    batch, a_stride, b_stride, c_stride, align_a, align_b, align_c};
  std::lock_guard<std::mutex> lock(mutex);
  auto found = plans.find(key);
  if (found != plans.end()) return found->second;
  Plan plan = make_plan(handle, p, batch, a_stride, b_stride, c_stride, align_a, align_b, align_c);
  return plans.emplace(key, plan).first->second;
}

}  // namespace

void gemm(const GemmProblem& p, void* stream) {
  if (p.m == 0 || p.n == 0 || p.n_batch == 0) return;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  cublasLtHandle_t handle = handle_for(device);
  void* workspace = workspace_for(device, stream);
  // The innermost batch axis is the strided batch; the outer ones loop here.
  int rank = p.a_batch.rank;
  int64_t inner = rank > 0 ? p.a_batch.shape[rank - 1] : 1;
  int64_t a_stride = rank > 0 ? p.a_batch.strides[rank - 1] : 0;
  int64_t b_stride = rank > 0 ? p.b_batch.strides[rank - 1] : 0;
  int64_t c_stride = rank > 0 ? p.c_batch.strides[rank - 1] : 0;
  int64_t n_outer = p.n_batch / inner;
  int element = dtype_size(p.dtype);
  const char* a_base = static_cast<const char*>(p.a);
  const char* b_base = static_cast<const char*>(p.b);
  char* c_base = static_cast<char*>(p.c);
  double one_f64 = 1.0, beta_f64 = p.accumulate ? 1.0 : 0.0;
  float one_f32 = 1.0f, beta_f32 = p.accumulate ? 1.0f : 0.0f;
  const void* alpha = p.dtype == DType::F64 ? static_cast<const void*>(&one_f64) : &one_f32;
  const void* beta = p.dtype == DType::F64 ? static_cast<const void*>(&beta_f64) : &beta_f32;
  for (int64_t outer = 0; outer < n_outer; ++outer) {
    // Offsets of the first product of this strided batch (linear index outer * inner).
    const char* a = a_base + p.a_batch.offset_of(outer * inner) * element;
    const char* b = b_base + p.b_batch.offset_of(outer * inner) * element;
    char* c = c_base + p.c_batch.offset_of(outer * inner) * element;
    const Plan& plan = plan_for(device, handle, p, inner, a_stride, b_stride, c_stride,
                                alignment_of(a, inner, a_stride, element), alignment_of(b, inner, b_stride, element),
                                alignment_of(c, inner, c_stride, element));
    CUBLAS_CHECK(cublasLtMatmul(handle, plan.operation, alpha, b, plan.a_layout, a, plan.b_layout, beta, c,
                                plan.c_layout, c, plan.c_layout, &plan.algo, workspace, workspace_bytes,
                                static_cast<cudaStream_t>(stream)));
  }
}

}  // namespace wick::cuda
