// bf16 matmul on the GPU: wick::matmul vs cuBLASLt called directly (f32 accumulation), 4096^3 and
// 8192^3, timed with CUDA events. Target: wick >= 95% of cuBLAS direct (ratio <= 1.05).
// Also measures the device-to-device copy bandwidth, the ceiling for memory-bound ops.
//   build/bench/cuda_matmul_bench
#include <cstdio>

#include "bench/bench_util.h"
#include "runtime/device.h"
#include "runtime/ops/copy.h"
#include "runtime/ops/matmul.h"

#if WICK_HAS_CUDA
#include <cublasLt.h>
#include <cuda_runtime.h>

#include "runtime/cuda/cuda_check.h"

namespace {

wick::Tensor random_device_matrix(int64_t rows, int64_t cols, float scale) {
  std::vector<float> values(static_cast<size_t>(rows * cols));
  uint32_t state = 12345u + static_cast<uint32_t>(rows);
  for (float& v : values) {
    state = state * 1664525u + 1013904223u;
    v = scale * (static_cast<float>(state >> 8) / 16777216.0f - 0.5f);
  }
  return wick::Tensor::from_vector<float>(values, {rows, cols}).to(wick::DType::BF16).to(wick::Device::cuda(0));
}

// Times `body` with CUDA events on the legacy default stream (the one wick's ops use by default).
template <typename Body>
void time_with_events(benchmark::State& state, Body&& body) {
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  body();  // warm-up: handles, descriptors, heuristics
  CUDA_CHECK(cudaDeviceSynchronize());
  for (auto _ : state) {
    CUDA_CHECK(cudaEventRecord(start, nullptr));
    body();
    CUDA_CHECK(cudaEventRecord(stop, nullptr));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    state.SetIterationTime(ms / 1000.0);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

void set_tflops(benchmark::State& state, int64_t n) {
  state.counters["TFLOP/s"] = benchmark::Counter(2.0 * n * n * n / 1e12, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_wick_bf16_matmul(benchmark::State& state) {
  int64_t n = state.range(0);
  wick::Tensor a = random_device_matrix(n, n, 1.0f), b = random_device_matrix(n, n, 1.0f);
  wick::Tensor c;
  time_with_events(state, [&] { c = wick::matmul(a, b); });
  set_tflops(state, n);
}

void BM_cublaslt_bf16_matmul(benchmark::State& state) {
  int64_t n = state.range(0);
  wick::Tensor a = random_device_matrix(n, n, 1.0f), b = random_device_matrix(n, n, 1.0f);
  wick::Tensor c = wick::Tensor::empty({n, n}, wick::DType::BF16, wick::Device::cuda(0));
  cublasLtHandle_t handle;
  CUBLAS_CHECK(cublasLtCreate(&handle));
  cublasLtMatmulDesc_t op;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasLtMatrixLayout_t layout;  // square, column-major view of row-major data: C^T = B^T A^T
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, CUDA_R_16BF, n, n, n));
  size_t workspace_bytes = 32 << 20;
  void* workspace = nullptr;
  CUDA_CHECK(cudaMalloc(&workspace, workspace_bytes));
  cublasLtMatmulPreference_t preference;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &workspace_bytes, sizeof(workspace_bytes)));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int n_results = 0;
  CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle, op, layout, layout, layout, layout, preference, 1, &heuristic,
                                              &n_results));
  float alpha = 1.0f, beta = 0.0f;
  time_with_events(state, [&] {
    CUBLAS_CHECK(cublasLtMatmul(handle, op, &alpha, b.data(), layout, a.data(), layout, &beta, c.data(), layout,
                                c.data(), layout, &heuristic.algo, workspace, workspace_bytes, nullptr));
  });
  set_tflops(state, n);
  cudaFree(workspace);
  cublasLtMatmulPreferenceDestroy(preference);
  cublasLtMatrixLayoutDestroy(layout);
  cublasLtMatmulDescDestroy(op);
  cublasLtDestroy(handle);
}

// Device-to-device copy of a 1 GiB buffer: bytes read + bytes written per second.
void BM_device_copy_bandwidth(benchmark::State& state) {
  size_t bytes = size_t(1) << 30;
  void *src = nullptr, *dst = nullptr;
  CUDA_CHECK(cudaMalloc(&src, bytes));
  CUDA_CHECK(cudaMalloc(&dst, bytes));
  CUDA_CHECK(cudaMemset(src, 1, bytes));
  time_with_events(state, [&] { CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, nullptr)); });
  state.counters["GB/s"] = benchmark::Counter(2.0 * bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  cudaFree(src);
  cudaFree(dst);
}

}  // namespace

BENCHMARK(BM_wick_bf16_matmul)->Arg(4096)->Arg(8192)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_cublaslt_bf16_matmul)->Arg(4096)->Arg(8192)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_device_copy_bandwidth)->UseManualTime()->Unit(benchmark::kMillisecond);
#endif

int main(int argc, char** argv) {
  if (wick::cuda_device_count() == 0) {
    std::printf("cuda_matmul_bench: no CUDA device on this machine; nothing measured\n");
    return 0;
  }
#if WICK_HAS_CUDA
  return wick::bench::run_with_ratios(argc, argv, {{"wick_bf16_matmul", "cublaslt_bf16_matmul"}});
#else
  return 0;
#endif
}
