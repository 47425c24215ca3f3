// One transformer-block LoRA training step on the GPU, the wick side of bench/gpu/block_vs_torch.py.
//
//   build/bench/cuda_block_bench [--benchmark_format=json]
//   WICK_BLOCK_BENCH_CPU_SMOKE=1 build/bench/cuda_block_bench   # the same step at width 64 on the CPU (f32)
//
// The step: pre-norm block (LayerNorm -> self-attention -> residual, LayerNorm -> MLP gelu_tanh ->
// residual), width 3072, 24 heads x 128, MLP 12288, 4096 tokens (batch 1). Base weights frozen in
// bf16, activations bf16; LoRA rank 16, alpha 16 on qkv, proj, fc1 and fc2 (f32 adapters cast to
// bf16 inside the forward, models/nn/lora.h); MSE in f32 against a random target; backward; AdamW on
// the adapters. The block's input requires a gradient, as for a block inside a stack.
//
//   BM_wick_bf16_matmul/8192       the reference rate: wick::matmul bf16 8192^3 (cuBLASLt)
//   BM_wick_block_lora_step/{0,1}  the step without (0) / with (1) autograd::checkpoint of the block;
//                                  counters: median_ms, tokens/s, TFLOP/s (model flops), MFU (vs 989
//                                  TFLOP/s, H100 SXM dense bf16), matmul_fraction (vs the measured
//                                  8192^3 rate), peak_MB (device memory above the pre-step level)
// Before measuring, a correctness guard runs 10 steps (finite losses, nonzero lora_up gradients
// after step 1, loss decreasing, the checkpointed step's gradients matching the plain step's).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "engine/autograd/backward.h"
#include "engine/autograd/checkpoint.h"
#include "engine/autograd/node.h"
#include "engine/autograd/ops_elementwise.h"
#include "engine/autograd/ops_layout.h"
#include "engine/autograd/ops_loss.h"
#include "engine/init.h"
#include "engine/module.h"
#include "engine/optim/optimizer.h"
#include "models/nn/adapters.h"
#include "models/nn/attention.h"
#include "models/nn/basic.h"
#include "models/nn/norm.h"
#include "runtime/device.h"
#include "runtime/memory.h"
#include "runtime/ops/matmul.h"
#include "runtime/ops/random.h"

#if WICK_HAS_CUDA
#include <cuda_runtime.h>

#include "runtime/cuda/cuda_check.h"
#endif

namespace {

using namespace wick;

struct BlockShape {
  int64_t dim, heads, hidden, tokens, rank;
  double alpha;
  DType dtype;
  Device device;
};

BlockShape smoke_shape() { return {64, 4, 256, 32, 16, 16.0, DType::F32, Device::cpu()}; }

constexpr float kLearningRate = 1e-3f;

// x -> norm1 -> attn -> + x -> norm2 -> mlp -> + (as bench/cpu_train_step_bench.cpp), every layer in
// the shape's dtype and on its device.
class PreNormBlock : public Module {
 public:
  explicit PreNormBlock(const BlockShape& s) {
    nn::LinearOptions linear{.dtype = s.dtype, .device = s.device, .trainable = false};
    register_module("norm1", std::make_shared<nn::LayerNorm>(Shape{s.dim}, 1e-5, true, s.dtype, s.device));
    register_module("attn",
                    std::make_shared<nn::MultiHeadAttention>(s.dim, s.heads, nn::AttentionOptions{.linear = linear}));
    register_module("norm2", std::make_shared<nn::LayerNorm>(Shape{s.dim}, 1e-5, true, s.dtype, s.device));
    register_module("mlp", std::make_shared<nn::MLP>(s.dim, s.hidden, "gelu_tanh", linear));
  }
  std::string type_name() const override { return "PreNormBlock"; }
  Tensor forward(const Tensor& x) override {
    Tensor h = autograd::add(x, child("attn")->forward(child("norm1")->forward(x)));
    return autograd::add(h, child("mlp")->forward(child("norm2")->forward(h)));
  }
};

// A block with LoRA on every linear, its optimizer, an input and a target: one training step per call.
class BlockRun {
 public:
  BlockRun(const BlockShape& s, bool checkpointed) : checkpointed_(checkpointed) {
    set_init_seed(3);
    block_ = std::make_shared<PreNormBlock>(s);
    nn::apply_adapters(*block_, {.type = "lora",
                                 .patterns = {"attn.qkv", "attn.proj", "mlp.fc1", "mlp.fc2"},
                                 .options = {.rank = s.rank, .alpha = s.alpha}});
    optimizer_ = make_optimizer("adamw", block_->trainable_parameters(), {.weight_decay = 1e-2f});
    x_ = randn({1, s.tokens, s.dim}, derive_stream(4, 0, 0, RngPurpose::Test), s.dtype, s.device);
    autograd::set_requires_grad(x_, true, "x");
    target_ = randn({1, s.tokens, s.dim}, derive_stream(5, 0, 0, RngPurpose::Test), DType::F32, s.device);
  }

  // Forward, f32 MSE, backward, AdamW step. Returns the gradients (x's and the adapters') and the loss.
  autograd::GradientStore step(Tensor* loss_out = nullptr) {
    Tensor out = checkpointed_ ? autograd::checkpoint(*block_, x_) : block_->forward(x_);
    Tensor loss = autograd::mse_loss(autograd::to_dtype(out, DType::F32), target_);
    autograd::GradientStore grads = autograd::backward(loss);
    optimizer_->step(grads, kLearningRate);
    if (loss_out != nullptr) *loss_out = loss;
    return grads;
  }

  const Module& block() const { return *block_; }
  int64_t n_trainable() const { return block_->n_parameters(true); }

 private:
  bool checkpointed_;
  std::shared_ptr<PreNormBlock> block_;
  std::unique_ptr<Optimizer> optimizer_;
  Tensor x_, target_;
};

std::vector<float> host_values(const Tensor& t) { return t.to(DType::F32).to_vector<float>(); }

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float e : v) m = std::max(m, static_cast<double>(std::fabs(e)));
  return m;
}

// The correctness guard: prints to stderr (stdout may carry JSON) and returns whether all checks held.
bool check_training(const BlockShape& s) {
  bool ok = true;
  auto fail = [&](const std::string& what) {
    std::fprintf(stderr, "guard FAILED: %s\n", what.c_str());
    ok = false;
  };
  BlockRun plain(s, false), checkpointed(s, true);
  std::vector<double> losses;
  Tensor loss, loss_ckpt;
  autograd::GradientStore first = plain.step(&loss);
  autograd::GradientStore first_ckpt = checkpointed.step(&loss_ckpt);
  losses.push_back(loss.item());
  if (!(std::fabs(loss_ckpt.item() - losses[0]) <= 1e-3 * std::fabs(losses[0])))
    fail("checkpointed step-1 loss " + std::to_string(loss_ckpt.item()) + " != plain " + std::to_string(losses[0]));
  auto adapters = nn::find_adapters(plain.block());
  auto adapters_ckpt = nn::find_adapters(checkpointed.block());
  if (adapters.size() != 4) fail("expected 4 adapters, found " + std::to_string(adapters.size()));
  for (size_t i = 0; i < adapters.size() && i < adapters_ckpt.size(); ++i) {
    const std::string& path = adapters[i].first;
    Tensor g = first.get(adapters[i].second->up_weight());
    Tensor g_ckpt = first_ckpt.get(adapters_ckpt[i].second->up_weight());
    if (!g.defined() || !g_ckpt.defined()) {
      fail(path + ".lora_up.weight has no gradient after step 1");
      continue;
    }
    std::vector<float> a = host_values(g), b = host_values(g_ckpt);
    double scale = max_abs(a), diff = 0;
    for (size_t j = 0; j < a.size(); ++j) diff = std::max(diff, static_cast<double>(std::fabs(a[j] - b[j])));
    std::fprintf(stderr, "guard: %-9s lora_up grad max|g| %.3e, checkpointed max|diff| %.3e\n", path.c_str(), scale,
                 diff);
    if (!(scale > 0)) fail(path + ".lora_up.weight gradient is zero or not finite after step 1");
    if (!(diff <= 2e-2 * scale)) fail(path + ".lora_up.weight gradient differs with checkpointing");
  }
  for (int i = 1; i < 10; ++i) {
    plain.step(&loss);
    losses.push_back(loss.item());
  }
  std::fprintf(stderr, "guard: losses (lr %.0e):", static_cast<double>(kLearningRate));
  for (double l : losses) std::fprintf(stderr, " %.6f", l);
  std::fprintf(stderr, "\n");
  for (double l : losses)
    if (!std::isfinite(l)) fail("a loss is not finite");
  if (!(losses.back() < losses.front())) fail("the loss did not decrease over 10 steps");
  std::fprintf(stderr, "guard: %s\n", ok ? "ok" : "FAILED");
  return ok;
}

#if WICK_HAS_CUDA

BlockShape gpu_shape() { return {3072, 24, 12288, 4096, 16, 16.0, DType::BF16, Device::cuda(0)}; }

constexpr double kPeakFlops = 989e12;  // H100 SXM dense bf16

// Model flops of one step (T tokens, width W, hidden H, rank r):
//   base linears (qkv W->3W, proj W->W, fc1 W->H, fc2 H->W; P_base = 4W^2 + 2WH weights):
//     forward 2·T·P_base, backward 2·T·P_base (input gradients only: no weight gradients for the
//     frozen base)
//   LoRA on each linear in->out: forward 2·T·r·(in+out), backward 4·T·r·(in+out) (input and weight
//     gradients of down and up)
//   attention: forward 4·T²·W (QKᵀ and PV), backward 2.5x that (QKᵀ recomputed, dV, dP, dQ, dK)
// Biases, norms, activations, the loss and the optimizer are not counted.
double model_flops(const BlockShape& s) {
  double t = static_cast<double>(s.tokens), w = static_cast<double>(s.dim), h = static_cast<double>(s.hidden);
  double p_base = 4 * w * w + 2 * w * h;
  double lora_in_out = (w + 3 * w) + (w + w) + (w + h) + (h + w);
  double attention_forward = 4 * t * t * w;
  return 4 * t * p_base + 6 * t * static_cast<double>(s.rank) * lora_in_out + 3.5 * attention_forward;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Milliseconds of one call of `body`, CUDA events on the legacy default stream (wick's default).
class EventTimer {
 public:
  EventTimer() {
    CUDA_CHECK(cudaEventCreate(&start_));
    CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~EventTimer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  template <typename Body>
  double time_ms(Body&& body) {
    CUDA_CHECK(cudaEventRecord(start_, nullptr));
    body();
    CUDA_CHECK(cudaEventRecord(stop_, nullptr));
    CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return ms;
  }

 private:
  cudaEvent_t start_, stop_;
};

double g_matmul_flops_per_s = 0;  // measured by BM_wick_bf16_matmul, else on first use

Tensor random_matrix(int64_t n, uint64_t seed) {
  return randn({n, n}, derive_stream(seed, 0, 0, RngPurpose::Test), DType::BF16, Device::cuda(0));
}

double matmul_flops_per_s() {
  if (g_matmul_flops_per_s > 0) return g_matmul_flops_per_s;
  int64_t n = 8192;
  Tensor a = random_matrix(n, 11), b = random_matrix(n, 12), c;
  EventTimer timer;
  std::vector<double> ms;
  for (int i = 0; i < 23; ++i) {
    double t = timer.time_ms([&] { c = wick::matmul(a, b); });
    if (i >= 3) ms.push_back(t);
  }
  return g_matmul_flops_per_s = 2.0 * n * n * n / (median(ms) * 1e-3);
}

void BM_wick_bf16_matmul(benchmark::State& state) {
  int64_t n = state.range(0);
  Tensor a = random_matrix(n, 11), b = random_matrix(n, 12), c;
  EventTimer timer;
  for (int i = 0; i < 3; ++i) c = wick::matmul(a, b);
  std::vector<double> ms;
  for (auto _ : state) {
    ms.push_back(timer.time_ms([&] { c = wick::matmul(a, b); }));
    state.SetIterationTime(ms.back() * 1e-3);
  }
  double rate = 2.0 * n * n * n / (median(ms) * 1e-3);
  if (n == 8192) g_matmul_flops_per_s = rate;
  state.counters["median_ms"] = median(ms);
  state.counters["TFLOP/s"] = rate / 1e12;
}

void BM_wick_block_lora_step(benchmark::State& state) {
  bool checkpointed = state.range(0) != 0;
  BlockShape s = gpu_shape();
  Device device = s.device;
  BlockRun run(s, checkpointed);
  for (int i = 0; i < 3; ++i) run.step();  // warm-up: cuDNN graphs, cuBLAS heuristics, optimizer state
  synchronize(device);
  int64_t before = memory_stats(device).current_bytes;
  reset_peak_memory(device);
  run.step();
  synchronize(device);
  double peak_bytes = static_cast<double>(memory_stats(device).peak_bytes - before);

  EventTimer timer;
  std::vector<double> ms;
  for (auto _ : state) {
    ms.push_back(timer.time_ms([&] { run.step(); }));
    state.SetIterationTime(ms.back() * 1e-3);
  }
  double step_s = median(ms) * 1e-3, flops = model_flops(s);
  state.counters["median_ms"] = step_s * 1e3;
  state.counters["tokens/s"] = static_cast<double>(s.tokens) / step_s;
  state.counters["model_GFLOP"] = flops / 1e9;
  state.counters["TFLOP/s"] = flops / step_s / 1e12;
  state.counters["MFU"] = flops / step_s / kPeakFlops;
  state.counters["matmul_fraction"] = flops / step_s / matmul_flops_per_s();
  state.counters["matmul_TFLOP/s"] = matmul_flops_per_s() / 1e12;
  state.counters["peak_MB"] = peak_bytes / 1e6;
  state.counters["trainable"] = static_cast<double>(run.n_trainable());
}

#endif

}  // namespace

#if WICK_HAS_CUDA
BENCHMARK(BM_wick_bf16_matmul)->Arg(8192)->Iterations(30)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_wick_block_lora_step)->Arg(0)->Arg(1)->Iterations(30)->UseManualTime()->Unit(benchmark::kMillisecond);
#endif

int main(int argc, char** argv) {
  const char* smoke = std::getenv("WICK_BLOCK_BENCH_CPU_SMOKE");
  if (smoke != nullptr && std::string(smoke) == "1") {
    BlockShape s = smoke_shape();
    std::fprintf(stderr, "cuda_block_bench: CPU smoke run (width %lld, %lld heads, %lld tokens, f32)\n",
                 static_cast<long long>(s.dim), static_cast<long long>(s.heads), static_cast<long long>(s.tokens));
    return check_training(s) ? 0 : 1;
  }
  if (cuda_device_count() == 0) {
    std::printf("cuda_block_bench: no CUDA device on this machine; nothing measured\n");
    return 0;
  }
#if WICK_HAS_CUDA
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if (!check_training(gpu_shape())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
#endif
  return 0;
}
