// CPU training steps, the wick side of bench/cpu_vs_torch.py (which runs the PyTorch side on the same
// shapes and threads and prints the ratios). Run it alone with
//   OMP_NUM_THREADS=2 build/bench/cpu_train_step_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//
//   BM_wick_mlp_step/128          MLP 784 -> 128 -> ReLU -> 10, batch 128, cross-entropy, backward, AdamW step
//   BM_wick_block_step/8          pre-norm transformer block, width 256, 4 heads, 64 tokens, batch 8, MLP 1024,
//                                 LoRA rank 8 (alpha 8) on attn.qkv and mlp.fc1, base frozen, MSE, AdamW step
//   BM_wick_adamw_step/10000000   one optimizer step on 10M parameters (gradients gathered from the store,
//   BM_wick_adamw8bit_step/...    clipping off, write-back included); counters: params/s, state bytes/param
//   BM_wick_checkpoint/{0,1}      12 blocks (width 256, 4 heads, 128 tokens, batch 4, all trainable), forward +
//                                 backward without (0) / with (1) autograd::checkpoint per block; counters:
//                                 activation bytes held after forward, peak bytes above the pre-step baseline
#include <cstdio>
#include <memory>
#include <string>

#include "bench/bench_util.h"
#include "engine/autograd/backward.h"
#include "engine/autograd/checkpoint.h"
#include "engine/autograd/node.h"
#include "engine/autograd/ops_elementwise.h"
#include "engine/autograd/ops_loss.h"
#include "engine/init.h"
#include "engine/module.h"
#include "engine/optim/optimizer.h"
#include "models/nn/adapters.h"
#include "models/nn/attention.h"
#include "models/nn/basic.h"
#include "models/nn/norm.h"
#include "runtime/memory.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/random.h"

namespace {

using namespace wick;

Tensor random_input(const Shape& shape, uint64_t seed) {
  return randn(shape, derive_stream(seed, 0, 0, RngPurpose::Test));
}

// x -> norm1 -> attn -> + x -> norm2 -> mlp -> + (as tests/models/torch_parity_test.cpp).
class PreNormBlock : public Module {
 public:
  PreNormBlock(int64_t dim, int64_t heads, int64_t hidden) {
    register_module("norm1", std::make_shared<nn::LayerNorm>(Shape{dim}));
    register_module("attn", std::make_shared<nn::MultiHeadAttention>(dim, heads));
    register_module("norm2", std::make_shared<nn::LayerNorm>(Shape{dim}));
    register_module("mlp", std::make_shared<nn::MLP>(dim, hidden, "gelu_tanh"));
  }
  std::string type_name() const override { return "PreNormBlock"; }
  Tensor forward(const Tensor& x) override {
    Tensor h = autograd::add(x, child("attn")->forward(child("norm1")->forward(x)));
    return autograd::add(h, child("mlp")->forward(child("norm2")->forward(h)));
  }
};

// A stack of blocks, each optionally run under autograd::checkpoint.
class BlockStack : public Module {
 public:
  BlockStack(int n_blocks, int64_t dim, int64_t heads, int64_t hidden) {
    for (int i = 0; i < n_blocks; ++i)
      register_module(std::to_string(i), std::make_shared<PreNormBlock>(dim, heads, hidden));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = x;
    for (const auto& [name, block] : children()) h = checkpointed ? autograd::checkpoint(*block, h) : block->forward(h);
    return h;
  }
  bool checkpointed = false;
};

void BM_wick_mlp_step(benchmark::State& state) {
  int64_t batch = state.range(0);
  set_init_seed(1);
  auto mlp = std::make_shared<nn::Sequential>();
  mlp->add(std::make_shared<nn::Linear>(784, 128));
  mlp->add(std::make_shared<nn::Activation>("relu"));
  mlp->add(std::make_shared<nn::Linear>(128, 10));
  auto opt = make_optimizer("adamw", mlp->trainable_parameters(), {.weight_decay = 1e-2f});
  Tensor x = random_input({batch, 784}, 2);
  std::vector<int64_t> label_values(static_cast<size_t>(batch));
  for (int64_t i = 0; i < batch; ++i) label_values[static_cast<size_t>(i)] = (i * 7) % 10;
  Tensor labels = Tensor::from_vector<int64_t>(label_values, {batch});
  for (auto _ : state) {
    Tensor loss = autograd::cross_entropy_with_logits(mlp->forward(x), labels);
    autograd::GradientStore grads = autograd::backward(loss);
    opt->step(grads, 1e-3f);
    benchmark::DoNotOptimize(loss.data());
  }
}

void BM_wick_block_step(benchmark::State& state) {
  int64_t batch = state.range(0), tokens = 64, dim = 256, heads = 4, hidden = 1024;
  set_init_seed(3);
  auto block = std::make_shared<PreNormBlock>(dim, heads, hidden);
  nn::apply_adapters(*block, {.type = "lora", .patterns = {"attn.qkv", "mlp.fc1"}, .options = {.rank = 8, .alpha = 8.0}});
  auto opt = make_optimizer("adamw", block->trainable_parameters(), {.weight_decay = 0.0f});
  Tensor x = random_input({batch, tokens, dim}, 4), target = random_input({batch, tokens, dim}, 5);
  for (auto _ : state) {
    Tensor loss = autograd::mse_loss(block->forward(x), target);
    autograd::GradientStore grads = autograd::backward(loss);
    opt->step(grads, 1e-3f);
    benchmark::DoNotOptimize(loss.data());
  }
  state.counters["trainable"] = static_cast<double>(block->n_parameters(true));
}

void optimizer_step(benchmark::State& state, const char* name) {
  int64_t n = state.range(0);
  Tensor p = random_input({n}, 6);
  autograd::set_requires_grad(p, true, "p");
  auto opt = make_optimizer(name, {{"p", p}}, {.weight_decay = 1e-2f});
  autograd::GradientStore grads;
  grads.add(p, wick::mul(random_input({n}, 7), 1e-3), true);
  for (auto _ : state) benchmark::DoNotOptimize(opt->step(grads, 1e-3f).grad_norm);
  state.counters["params/s"] = benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["state_bytes/param"] = static_cast<double>(opt->state_bytes()) / static_cast<double>(n);
}

void BM_wick_adamw_step(benchmark::State& state) { optimizer_step(state, "adamw"); }
void BM_wick_adamw8bit_step(benchmark::State& state) { optimizer_step(state, "adamw8bit"); }

void BM_wick_checkpoint(benchmark::State& state) {
  bool checkpointed = state.range(0) != 0;
  set_init_seed(8);
  auto stack = std::make_shared<BlockStack>(12, 256, 4, 1024);
  stack->checkpointed = checkpointed;
  Tensor x = random_input({4, 128, 256}, 9), target = random_input({4, 128, 256}, 10);
  double held_after_forward = 0, peak_above_baseline = 0;
  for (auto _ : state) {
    int64_t baseline = memory_stats(Device::cpu()).current_bytes;
    reset_peak_memory(Device::cpu());
    Tensor loss = autograd::mse_loss(stack->forward(x), target);
    held_after_forward = static_cast<double>(memory_stats(Device::cpu()).current_bytes - baseline);
    autograd::GradientStore grads = autograd::backward(loss);
    peak_above_baseline = static_cast<double>(memory_stats(Device::cpu()).peak_bytes - baseline);
    benchmark::DoNotOptimize(grads.size());
  }
  state.counters["held_after_forward_MB"] = held_after_forward / 1e6;
  state.counters["peak_above_baseline_MB"] = peak_above_baseline / 1e6;
  state.counters["parameters_MB"] = static_cast<double>(stack->n_parameters()) * 4 / 1e6;
}

}  // namespace

BENCHMARK(BM_wick_mlp_step)->Arg(128)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_wick_block_step)->Arg(8)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_wick_adamw_step)->Arg(10000000)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_wick_adamw8bit_step)->Arg(10000000)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_wick_checkpoint)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

int main(int argc, char** argv) {
  return wick::bench::run_with_ratios(argc, argv, {{"wick_adamw8bit_step", "wick_adamw_step"}});
}
