// The GPU ops a diffusion trainer spends its non-matmul time in, bf16 on cuda:0, timed with CUDA
// events: layer_norm, rms_norm, softmax and gelu_tanh over x [16384, 3072], scaled dot-product
// attention at Flux shapes (B 1, H 24, L 4608, D 128), each forward and backward; AdamW and 8-bit
// AdamW steps over 256M parameters (the flat kernel, and the Optimizer front the trainer calls).
// bench/gpu/ops_vs_torch.py runs this program and times PyTorch eager on the same shapes.
//   build/bench/cuda_ops_bench [--benchmark_filter=norm] [--benchmark_out=r.json --benchmark_out_format=json]
// Counters come from the median iteration: median_ms; GB/s over each case's minimal bytes (formula
// beside the case) and pct_of_copy (that over the device-to-device copy bandwidth, measured here);
// TFLOP/s for attention. Every case first checks its outputs are finite and not all equal; a
// failed check marks the benchmark as an error and the program exits with status 1.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>

#include "runtime/device.h"

#if WICK_HAS_CUDA
#include <cuda_runtime.h>

#include "engine/autograd/backward.h"
#include "engine/autograd/node.h"
#include "engine/optim/flat_optimizers.h"
#include "engine/optim/optimizer.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/ops/attention.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/norm.h"
#include "runtime/ops/random.h"
#include "runtime/ops/reduce.h"
#include "runtime/ops/softmax.h"

namespace {

using wick::DType;
using wick::Tensor;
using Outputs = std::vector<std::pair<std::string, Tensor>>;

constexpr int64_t kRows = 16384, kCols = 3072;                       // x [kRows, kCols]
constexpr int64_t kHeads = 24, kTokens = 4608, kHeadDim = 128;       // Flux attention, batch 1
constexpr int64_t kOptimizerParams = int64_t(256) << 20;             // 256M f32 parameters
constexpr double kElements = static_cast<double>(kRows * kCols);
constexpr double kBf16 = 2.0, kF32 = 4.0;
// Before each timed call a memset of this many bytes evicts the inputs from L2 and keeps the GPU
// busy while the host enqueues the call, so host launch overhead is not counted.
constexpr size_t kFillerBytes = size_t(512) << 20;

int g_failed_checks = 0;

wick::Device gpu() { return wick::Device::cuda(0); }

// Normal(mean, std) values from the fixed Philox stream `id` (seed 2026), so every run sees the same inputs.
Tensor random_normal(const wick::Shape& shape, uint64_t id, DType dtype, double mean = 0.0, double std = 1.0) {
  return wick::normal(shape, mean, std, wick::derive_stream(2026, id, 0, wick::RngPurpose::Test), dtype, gpu());
}

void* filler_buffer() {
  static void* buffer = [] {
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, kFillerBytes));
    return p;
  }();
  return buffer;
}

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

// Times `body` per iteration with CUDA events on the legacy default stream (the one wick's ops use
// by default) after the L2-evicting filler; the caller has run it once already (warm-up, checks).
// Returns the median milliseconds and records it as the counter median_ms.
template <typename Body>
double time_with_events(benchmark::State& state, Body&& body) {
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  void* filler = filler_buffer();
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<double> times_ms;
  int fill_value = 0;
  for (auto _ : state) {
    CUDA_CHECK(cudaMemsetAsync(filler, ++fill_value & 0xff, kFillerBytes, nullptr));
    CUDA_CHECK(cudaEventRecord(start, nullptr));
    body();
    CUDA_CHECK(cudaEventRecord(stop, nullptr));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    state.SetIterationTime(ms / 1000.0);
    times_ms.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  double m = median(std::move(times_ms));
  state.counters["median_ms"] = m;
  return m;
}

// Device-to-device copy of 1 GiB: median over 50 copies after 5, bytes read + written per second.
double copy_bandwidth_gbps() {
  static double gbps = [] {
    size_t bytes = size_t(1) << 30;
    void *src = nullptr, *dst = nullptr;
    CUDA_CHECK(cudaMalloc(&src, bytes));
    CUDA_CHECK(cudaMalloc(&dst, bytes));
    CUDA_CHECK(cudaMemset(src, 1, bytes));
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    std::vector<double> times_ms;
    for (int i = 0; i < 55; ++i) {
      CUDA_CHECK(cudaEventRecord(start, nullptr));
      CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, nullptr));
      CUDA_CHECK(cudaEventRecord(stop, nullptr));
      CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      if (i >= 5) times_ms.push_back(ms);
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaFree(src);
    cudaFree(dst);
    return 2.0 * static_cast<double>(bytes) / (median(std::move(times_ms)) * 1e-3) / 1e9;
  }();
  return gbps;
}

void set_bandwidth(benchmark::State& state, double bytes, double median_ms) {
  if (median_ms <= 0.0) return;
  double gbps = bytes / (median_ms * 1e-3) / 1e9;
  state.counters["GB/s"] = gbps;
  state.counters["pct_of_copy"] = 100.0 * gbps / copy_bandwidth_gbps();
}

// Smallest and largest element; rows of 4096 are reduced first (a whole-tensor reduction is one row).
std::pair<double, double> extremes(const Tensor& t) {
  Tensor flat = t.contiguous().reshape({-1});
  if (flat.numel() > 4096 && flat.numel() % 4096 == 0) {
    Tensor rows = flat.view({-1, 4096});
    std::vector<int64_t> across = {1};
    return {wick::min(wick::min(rows, across)).item(), wick::max(wick::max(rows, across)).item()};
  }
  return {wick::min(flat).item(), wick::max(flat).item()};
}

// True when every output is finite and not all equal; otherwise reports the error (the benchmark is
// skipped, the program will exit 1).
bool outputs_ok(benchmark::State& state, const std::string& bench_case, const Outputs& outputs) {
  for (const auto& [name, tensor] : outputs) {
    auto [lo, hi] = extremes(tensor);
    if (std::isfinite(lo) && std::isfinite(hi) && lo != hi) continue;
    std::string message = bench_case + ": output " + name + " " + tensor.describe() + " has min " +
                          std::to_string(lo) + " and max " + std::to_string(hi) +
                          "; expected finite values that are not all equal";
    std::fprintf(stderr, "cuda_ops_bench: check failed: %s\n", message.c_str());
    ++g_failed_checks;
    state.SkipWithError(message.c_str());
    return false;
  }
  return true;
}

// ---- norms, softmax, gelu: x [16384, 3072] bf16; weight ~ N(1, 0.1), bias ~ N(0, 0.1), bf16 ----
// The runtime ops below are what the autograd nodes (engine/autograd/ops_norm.cpp, ops_reduce.cpp,
// ops_elementwise.cpp) call in training.

// Reads x, weight, bias; writes y, mean, rstd (f32 per row): 2 N D bf16 + 2 D bf16 + 2 N f32.
void BM_wick_layer_norm_fwd(benchmark::State& state) {
  Tensor x = random_normal({kRows, kCols}, 1, DType::BF16);
  Tensor w = random_normal({kCols}, 2, DType::BF16, 1.0, 0.1), b = random_normal({kCols}, 3, DType::BF16, 0.0, 0.1);
  wick::LayerNormResult r;
  auto body = [&] { r = wick::layer_norm(x, {kCols}, w, b, 1e-5); };
  body();
  if (!outputs_ok(state, "layer_norm_fwd", {{"y", r.y}, {"mean", r.mean}, {"rstd", r.rstd}})) return;
  double ms = time_with_events(state, body);
  set_bandwidth(state, 2 * kElements * kBf16 + 2 * kCols * kBf16 + 2 * kRows * kF32, ms);
}

// Reads dy, x, mean, rstd, weight; writes dx (bf16), dweight, dbias (f32):
// 3 N D bf16 + 2 N f32 + D bf16 + 2 D f32.
void BM_wick_layer_norm_bwd(benchmark::State& state) {
  Tensor x = random_normal({kRows, kCols}, 1, DType::BF16), dy = random_normal({kRows, kCols}, 4, DType::BF16);
  Tensor w = random_normal({kCols}, 2, DType::BF16, 1.0, 0.1), b = random_normal({kCols}, 3, DType::BF16, 0.0, 0.1);
  wick::LayerNormResult f = wick::layer_norm(x, {kCols}, w, b, 1e-5);
  wick::LayerNormGrads g;
  auto body = [&] { g = wick::layer_norm_backward(dy, x, f.mean, f.rstd, w, /*with_bias_grad=*/true); };
  body();
  if (!outputs_ok(state, "layer_norm_bwd", {{"dx", g.grad_x}, {"dweight", g.grad_weight}, {"dbias", g.grad_bias}}))
    return;
  double ms = time_with_events(state, body);
  set_bandwidth(state, 3 * kElements * kBf16 + 2 * kRows * kF32 + kCols * kBf16 + 2 * kCols * kF32, ms);
}

// Reads x, weight; writes y, rstd (f32 per row): 2 N D bf16 + D bf16 + N f32.
void BM_wick_rms_norm_fwd(benchmark::State& state) {
  Tensor x = random_normal({kRows, kCols}, 1, DType::BF16), w = random_normal({kCols}, 2, DType::BF16, 1.0, 0.1);
  wick::RmsNormResult r;
  auto body = [&] { r = wick::rms_norm(x, w, 1e-6); };
  body();
  if (!outputs_ok(state, "rms_norm_fwd", {{"y", r.y}, {"rstd", r.rstd}})) return;
  double ms = time_with_events(state, body);
  set_bandwidth(state, 2 * kElements * kBf16 + kCols * kBf16 + kRows * kF32, ms);
}

// Reads dy, x, rstd, weight; writes dx (bf16), dweight (f32): 3 N D bf16 + N f32 + D bf16 + D f32.
void BM_wick_rms_norm_bwd(benchmark::State& state) {
  Tensor x = random_normal({kRows, kCols}, 1, DType::BF16), dy = random_normal({kRows, kCols}, 4, DType::BF16);
  Tensor w = random_normal({kCols}, 2, DType::BF16, 1.0, 0.1);
  wick::RmsNormResult f = wick::rms_norm(x, w, 1e-6);
  wick::RmsNormGrads g;
  auto body = [&] { g = wick::rms_norm_backward(dy, x, f.rstd, w); };
  body();
  if (!outputs_ok(state, "rms_norm_bwd", {{"dx", g.grad_x}, {"dweight", g.grad_weight}})) return;
  double ms = time_with_events(state, body);
  set_bandwidth(state, 3 * kElements * kBf16 + kRows * kF32 + kCols * kBf16 + kCols * kF32, ms);
}

// Reads x; writes y: 2 N D bf16.
void BM_wick_softmax_fwd(benchmark::State& state) {
  Tensor x = random_normal({kRows, kCols}, 1, DType::BF16), y;
  auto body = [&] { y = wick::softmax(x, -1); };
  body();
  if (!outputs_ok(state, "softmax_fwd", {{"y", y}})) return;
  double ms = time_with_events(state, body);
  set_bandwidth(state, 2 * kElements * kBf16, ms);
}

// Reads dy, y; writes dx: 3 N D bf16. What autograd's SoftmaxNode runs: the fused
// softmax_backward, dx = y (dy - sum(dy y)) along the last axis.
void BM_wick_softmax_bwd(benchmark::State& state) {
  Tensor y = wick::softmax(random_normal({kRows, kCols}, 1, DType::BF16), -1);
  Tensor dy = random_normal({kRows, kCols}, 4, DType::BF16), dx;
  auto body = [&] { dx = wick::softmax_backward(dy, y, -1); };
  body();
  if (!outputs_ok(state, "softmax_bwd", {{"dx", dx}})) return;
  double ms = time_with_events(state, body);
  set_bandwidth(state, 3 * kElements * kBf16, ms);
}

// gelu_tanh is torch's gelu(approximate="tanh"). Reads x; writes y: 2 N D bf16.
void BM_wick_gelu_fwd(benchmark::State& state) {
  Tensor x = random_normal({kRows, kCols}, 1, DType::BF16), y;
  auto body = [&] { y = wick::gelu_tanh(x); };
  body();
  if (!outputs_ok(state, "gelu_fwd", {{"y", y}})) return;
  double ms = time_with_events(state, body);
  set_bandwidth(state, 2 * kElements * kBf16, ms);
}

// Reads dy, x; writes dx: 3 N D bf16 (the fused kernel autograd's ActivationNode calls).
void BM_wick_gelu_bwd(benchmark::State& state) {
  Tensor x = random_normal({kRows, kCols}, 1, DType::BF16), dy = random_normal({kRows, kCols}, 4, DType::BF16), dx;
  auto body = [&] { dx = wick::unary_backward(wick::UnaryOp::GeluTanh, dy, x); };
  body();
  if (!outputs_ok(state, "gelu_bwd", {{"dx", dx}})) return;
  double ms = time_with_events(state, body);
  set_bandwidth(state, 3 * kElements * kBf16, ms);
}

// ---- attention: q, k, v [1, 24, 4608, 128] bf16, non-causal, no mask, scale 1/sqrt(128) ----
// FLOPs (the FlashAttention convention): forward 4 B H L^2 D (two matmuls), backward 2.5x forward.
constexpr double kAttentionFlops = 4.0 * 1 * kHeads * kTokens * kTokens * kHeadDim;

void set_tflops(benchmark::State& state, double flops, double median_ms) {
  if (median_ms > 0.0) state.counters["TFLOP/s"] = flops / (median_ms * 1e-3) / 1e12;
}

void BM_wick_sdpa_fwd(benchmark::State& state) {
  wick::Shape shape = {1, kHeads, kTokens, kHeadDim};
  Tensor q = random_normal(shape, 11, DType::BF16), k = random_normal(shape, 12, DType::BF16);
  Tensor v = random_normal(shape, 13, DType::BF16);
  state.SetLabel(wick::attention_backend_name(q, k, v));
  wick::AttentionResult r;
  auto body = [&] { r = wick::scaled_dot_product_attention(q, k, v); };
  body();
  if (!outputs_ok(state, "sdpa_fwd", {{"out", r.out}, {"logsumexp", r.logsumexp}})) return;
  set_tflops(state, kAttentionFlops, time_with_events(state, body));
}

void BM_wick_sdpa_bwd(benchmark::State& state) {
  wick::Shape shape = {1, kHeads, kTokens, kHeadDim};
  Tensor q = random_normal(shape, 11, DType::BF16), k = random_normal(shape, 12, DType::BF16);
  Tensor v = random_normal(shape, 13, DType::BF16), grad_out = random_normal(shape, 14, DType::BF16);
  state.SetLabel(wick::attention_backward_backend_name(q, k, v));
  wick::AttentionResult f = wick::scaled_dot_product_attention(q, k, v);
  wick::AttentionGrads g;
  auto body = [&] { g = wick::scaled_dot_product_attention_backward(grad_out, q, k, v, f.out, f.logsumexp); };
  body();
  if (!outputs_ok(state, "sdpa_bwd", {{"dq", g.grad_q}, {"dk", g.grad_k}, {"dv", g.grad_v}})) return;
  set_tflops(state, 2.5 * kAttentionFlops, time_with_events(state, body));
}

// ---- optimizer steps over 256M f32 parameters, f32 gradients ~ N(0, 1), lr 1e-4, wd 1e-2 ----
// Minimal bytes per parameter: AdamW reads p, g, m, v and writes p, m, v (28 B); 8-bit AdamW reads
// p, g (8 B), two u8 codes (2 B) and writes p and the codes (6 B), plus per 256-element block two
// f32 absmax read and written (16 B / 256).
double optimizer_bytes(bool eight_bit) {
  double n = static_cast<double>(kOptimizerParams);
  return eight_bit ? 16.0 * n + 16.0 * static_cast<double>(wick::n_quantization_blocks(kOptimizerParams)) : 28.0 * n;
}

// The flat fused kernel (engine/optim/flat_optimizers.h) over one buffer; the skipped-element count
// stays on the device, so nothing synchronizes (as torch's fused step).
void run_flat_step(benchmark::State& state, bool eight_bit, const char* bench_case) {
  Tensor p = random_normal({kOptimizerParams}, 21, DType::F32), g = random_normal({kOptimizerParams}, 22, DType::F32);
  wick::AdamWState adam = wick::AdamWState::zeros(kOptimizerParams, eight_bit, gpu());
  Tensor skipped = Tensor::scalar(0.0, DType::I64, gpu());
  wick::AdamWHyper hyper{.lr = 1e-4f, .weight_decay = 1e-2f};
  int64_t t = 0;
  auto body = [&] {
    hyper.step = ++t;
    wick::adamw_step(p, g, adam, hyper, skipped);
  };
  body();
  Tensor moment = eight_bit ? adam.absmax_m : adam.m;
  if (!outputs_ok(state, bench_case, {{"p", p}, {eight_bit ? "absmax_m" : "m", moment}})) return;
  double ms = time_with_events(state, body);
  if (skipped.item() != 0.0) {
    std::string message = std::string(bench_case) + ": " + std::to_string(skipped.item()) + " elements skipped";
    std::fprintf(stderr, "cuda_ops_bench: check failed: %s\n", message.c_str());
    ++g_failed_checks;
    state.SkipWithError(message.c_str());
    return;
  }
  set_bandwidth(state, optimizer_bytes(eight_bit), ms);
}

void BM_wick_adamw_step(benchmark::State& state) { run_flat_step(state, false, "adamw_step"); }
void BM_wick_adamw8bit_step(benchmark::State& state) { run_flat_step(state, true, "adamw8bit_step"); }

// What the trainer calls: Optimizer::step (engine/optim/optimizer.h) with one f32 parameter of 256M
// elements and its gradient in a GradientStore: gathers the gradient into the flat buffer, computes
// the global norm (no clipping), runs the flat kernel and writes the master back (synchronizing to
// read the norm and the count). Bytes counted: the kernel's minimal bytes, so pct_of_copy shows
// what the front adds.
void run_optimizer_step(benchmark::State& state, bool eight_bit, const char* bench_case) {
  Tensor param = random_normal({kOptimizerParams}, 21, DType::F32);
  wick::autograd::set_requires_grad(param, true, "w");
  wick::autograd::GradientStore grads;
  grads.add(param, random_normal({kOptimizerParams}, 22, DType::F32), /*overwrite=*/true);
  auto optimizer = wick::make_optimizer(eight_bit ? "adamw8bit" : "adamw", {{"w", param}},
                                        {.weight_decay = 1e-2f, .max_grad_norm = 0.0f});
  wick::StepReport report;
  auto body = [&] { report = optimizer->step(grads, 1e-4f); };
  body();
  if (!outputs_ok(state, bench_case, {{"w", param}})) return;
  double ms = time_with_events(state, body);
  if (report.n_nonfinite != 0 || report.n_missing != 0 || !std::isfinite(report.grad_norm)) {
    std::string message = std::string(bench_case) + ": step report has " + std::to_string(report.n_nonfinite) +
                          " skipped, " + std::to_string(report.n_missing) + " missing, grad norm " +
                          std::to_string(report.grad_norm);
    std::fprintf(stderr, "cuda_ops_bench: check failed: %s\n", message.c_str());
    ++g_failed_checks;
    state.SkipWithError(message.c_str());
    return;
  }
  set_bandwidth(state, optimizer_bytes(eight_bit), ms);
}

void BM_wick_adamw_optimizer_step(benchmark::State& state) { run_optimizer_step(state, false, "adamw_optimizer"); }
void BM_wick_adamw8bit_optimizer_step(benchmark::State& state) {
  run_optimizer_step(state, true, "adamw8bit_optimizer");
}

// Device-to-device copy of 1 GiB, bytes read + written: the ceiling for the memory-bound cases.
void BM_device_copy_bandwidth(benchmark::State& state) {
  size_t bytes = size_t(1) << 30;
  void *src = nullptr, *dst = nullptr;
  CUDA_CHECK(cudaMalloc(&src, bytes));
  CUDA_CHECK(cudaMalloc(&dst, bytes));
  CUDA_CHECK(cudaMemset(src, 1, bytes));
  auto body = [&] { CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, nullptr)); };
  body();
  double ms = time_with_events(state, body);
  if (ms > 0.0) state.counters["GB/s"] = 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
  cudaFree(src);
  cudaFree(dst);
}

}  // namespace

// Fixed iteration counts keep the program well under 30 s on an H100, with >= 50 samples per median.
BENCHMARK(BM_device_copy_bandwidth)->Iterations(100)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_wick_layer_norm_fwd)->Iterations(200)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_wick_layer_norm_bwd)->Iterations(200)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_wick_rms_norm_fwd)->Iterations(200)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_wick_rms_norm_bwd)->Iterations(200)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_wick_softmax_fwd)->Iterations(200)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_wick_softmax_bwd)->Iterations(200)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_wick_gelu_fwd)->Iterations(200)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_wick_gelu_bwd)->Iterations(200)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_wick_sdpa_fwd)->Iterations(100)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_wick_sdpa_bwd)->Iterations(60)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_wick_adamw_step)->Iterations(100)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_wick_adamw8bit_step)->Iterations(100)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_wick_adamw_optimizer_step)->Iterations(50)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_wick_adamw8bit_optimizer_step)->Iterations(50)->UseManualTime()->Unit(benchmark::kMillisecond);
#endif

int main(int argc, char** argv) {
  if (wick::cuda_device_count() == 0) {
    std::printf("cuda_ops_bench: no CUDA device on this machine; nothing measured\n");
    return 0;
  }
#if WICK_HAS_CUDA
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (g_failed_checks > 0) {
    std::fprintf(stderr, "cuda_ops_bench: %d output check(s) failed; see the messages above\n", g_failed_checks);
    return 1;
  }
#endif
  return 0;
}
