// The quickstart's training step, the wick side of bench/dit_vs_torch.py (which builds the same DiT in
// PyTorch, times it on the same shapes and threads and prints the ratios). Run it alone with
//   OMP_NUM_THREADS=2 build/bench/cpu_dit_step_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//   WICK_BENCH_DEVICE=cuda WICK_BENCH_DTYPE=bf16 WICK_BENCH_BATCH=256 build/bench/cpu_dit_step_bench
// Environment: WICK_BENCH_DEVICE cpu (default) | cuda (device 0); WICK_BENCH_DTYPE f32 (default) | bf16
// (bf16 weights and activations, f32 masters in the optimizer and an f32 loss, as `wick train` with
// mixed_precision bf16); WICK_BENCH_BATCH (default 32, the quickstart's). On CUDA every iteration ends
// with a device synchronization, so times are wall times of whole steps.
//
// The model is configs/quickstart.yaml's DiT (hidden 96, depth 3, 4 heads, patch 2, MLP ratio 4) on the
// quickstart dataset's shapes (latents 4x14x14, 8 hashed-word tokens of width 64, pooled width 64); batch 32,
// rectified flow (logit-normal σ, x_t = (1 − σ)·x0 + σ·ε, target ε − x0, MSE), AdamW (lr 1e-3, weight
// decay 0, clipping at norm 1), all parameters trainable, as the quickstart trains it.
//
//   BM_wick_dit_step/32              noise + forward + loss + backward + AdamW step; counters samples/s, parameters
//   BM_wick_dit_forward/32           noise + forward + loss only               (the phases, for profiling:
//   BM_wick_dit_forward_backward/32  noise + forward + loss + backward          backward = this − forward)
//   BM_wick_dit_optimizer/32         the AdamW step alone on a fixed gradient store
//   BM_wick_loader/32                batches/s the Prefetcher delivers from a packed Fashion-MNIST file (2,000
//                                    samples, written to a temporary folder; skipped when Debian's
//                                    dataset-fashion-mnist is not installed); counter samples/s
//   BM_wick_dit_step_loaded/32       the trainer's step fed by that Prefetcher (scale, caption dropout 0.1, noise,
//                                    step): equal to BM_wick_dit_step when the loader keeps ahead
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include <unistd.h>

#include "bench/bench_util.h"
#include "engine/autograd/backward.h"
#include "engine/autograd/ops_layout.h"
#include "engine/data/distributed_sampler.h"
#include "engine/data/fashion_pack.h"
#include "engine/data/idx.h"
#include "engine/data/latent_dataset.h"
#include "engine/data/prefetcher.h"
#include "engine/init.h"
#include "engine/optim/optimizer.h"
#include "models/diffusion/flow_matching.h"
#include "models/diffusion/objective.h"
#include "models/dit/dit.h"
#include "runtime/device.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/random.h"
#include "runtime/philox.h"

namespace {

using namespace wick;
namespace fs = std::filesystem;

constexpr int64_t kChannels = 4, kLatentSize = 14, kTextTokens = 8, kTextDim = 64, kPooledDim = 64;
constexpr uint64_t kSeed = 42;

// Where and in which dtype the step runs (the environment variables above).
struct BenchSetup {
  Device device = Device::cpu();
  DType dtype = DType::F32;
  int64_t batch = 32;
};

const BenchSetup& setup() {
  static const BenchSetup s = [] {
    BenchSetup out;
    auto env = [](const char* name, const char* fallback) {
      const char* v = std::getenv(name);
      return std::string(v && *v ? v : fallback);
    };
    const std::string device = env("WICK_BENCH_DEVICE", "cpu"), dtype = env("WICK_BENCH_DTYPE", "f32");
    if (device == "cuda") {
      WICK_CHECK(cuda_device_count() > 0, "WICK_BENCH_DEVICE=cuda but no CUDA device is visible");
      out.device = Device::cuda(0);
    } else {
      WICK_CHECK(device == "cpu", "WICK_BENCH_DEVICE must be cpu or cuda, got ", device);
    }
    WICK_CHECK(dtype == "f32" || dtype == "bf16", "WICK_BENCH_DTYPE must be f32 or bf16, got ", dtype);
    out.dtype = dtype == "bf16" ? DType::BF16 : DType::F32;
    out.batch = std::stoll(env("WICK_BENCH_BATCH", "32"));
    WICK_CHECK(out.batch > 0, "WICK_BENCH_BATCH must be positive");
    return out;
  }();
  return s;
}

// Ends an iteration: on CUDA the step's kernels must have finished before the clock is read.
void finish_iteration() {
  if (setup().device.is_cuda()) synchronize(setup().device);
}

DiTConfig quickstart_dit() {
  return DiTConfig{.in_channels = kChannels, .input_size = kLatentSize, .patch_size = 2, .hidden_size = 96,
                   .depth = 3, .num_heads = 4, .mlp_ratio = 4.0, .text_dim = kTextDim, .pooled_dim = kPooledDim,
                   .dtype = setup().dtype, .device = setup().device};
}

Tensor random_input(const Shape& shape, uint64_t seed, double scale = 1.0) {
  Tensor t = randn(shape, derive_stream(seed, 0, 0, RngPurpose::Test));
  return scale == 1.0 ? t : mul(t, scale);
}

// A batch shaped like the quickstart's: latents in about [-1, 1], hashed-word-like tokens (entries of
// size 1/sqrt(D)), sample i keeping 1 + i % 3 of its 8 tokens (the captions are one to three words).
struct RandomBatch {
  Tensor x0, context, mask, pooled;
  std::vector<uint64_t> ids;
};

RandomBatch random_batch(int64_t batch) {
  RandomBatch b;
  b.x0 = random_input({batch, kChannels, kLatentSize, kLatentSize}, 1, 0.5);
  b.context = random_input({batch, kTextTokens, kTextDim}, 2, 0.125);
  b.pooled = random_input({batch, kPooledDim}, 3, 0.125);
  std::vector<uint8_t> keep(static_cast<size_t>(batch * kTextTokens), 0);
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t j = 0; j < 1 + i % 3; ++j) keep[static_cast<size_t>(i * kTextTokens + j)] = 1;
  b.mask = Tensor::from_vector<uint8_t>(keep, {batch, kTextTokens});
  for (int64_t i = 0; i < batch; ++i) b.ids.push_back(static_cast<uint64_t>(i));
  const Device device = setup().device;
  b.x0 = b.x0.to(device), b.context = b.context.to(device), b.pooled = b.pooled.to(device), b.mask = b.mask.to(device);
  return b;
}

// The model and optimizer as `wick train configs/quickstart.yaml` builds them.
struct QuickstartModel {
  std::shared_ptr<DiT> dit;
  std::unique_ptr<Optimizer> optimizer;
  diffusion::FlowMatchingConfig flow;  // logit-normal σ (mean 0, std 1), no shift
};

QuickstartModel make_model() {
  QuickstartModel m;
  set_init_seed(kSeed);
  m.dit = std::make_shared<DiT>(quickstart_dit());
  m.dit->set_all_trainable(true);
  m.optimizer = make_optimizer("adamw", m.dit->trainable_parameters(), {.weight_decay = 0.0f, .max_grad_norm = 1.0f});
  return m;
}

// The model's prediction in the compute dtype and the loss in f32, as models/diffusion/objective.cpp.
Tensor predict_and_loss(QuickstartModel& m, const diffusion::FlowMatchingBatch& fb, const Tensor& context,
                        const Tensor& mask, const Tensor& pooled) {
  const DType compute = setup().dtype;
  Tensor x_in = fb.x_t.dtype() == compute ? fb.x_t : fb.x_t.to(compute);
  Tensor pred = m.dit->forward(x_in, fb.sigma, context, mask, pooled);
  if (pred.dtype() != DType::F32) pred = autograd::to_dtype(pred, DType::F32);
  return diffusion::flow_matching_loss(pred, fb.target);
}

// Noise, forward and loss for one batch; `epoch` varies the noise and σ between iterations.
Tensor forward_loss(QuickstartModel& m, const RandomBatch& b, uint64_t epoch) {
  diffusion::FlowMatchingBatch fb = diffusion::make_flow_batch(b.x0, b.ids, epoch, kSeed, m.flow);
  return predict_and_loss(m, fb, b.context, b.mask, b.pooled);
}

void set_counters(benchmark::State& state, const QuickstartModel& m, int64_t batch) {
  state.counters["samples/s"] =
      benchmark::Counter(static_cast<double>(batch), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["parameters"] = static_cast<double>(m.dit->n_parameters());
}

void BM_wick_dit_step(benchmark::State& state) {
  const int64_t batch = state.range(0);
  QuickstartModel m = make_model();
  RandomBatch b = random_batch(batch);
  uint64_t epoch = 0;
  for (auto _ : state) {
    Tensor loss = forward_loss(m, b, epoch++);
    autograd::GradientStore grads = autograd::backward(loss);
    m.optimizer->step(grads, 1e-3f);
    benchmark::DoNotOptimize(loss.data());
    finish_iteration();
  }
  set_counters(state, m, batch);
}

void BM_wick_dit_forward(benchmark::State& state) {
  const int64_t batch = state.range(0);
  QuickstartModel m = make_model();
  RandomBatch b = random_batch(batch);
  uint64_t epoch = 0;
  for (auto _ : state) {
    Tensor loss = forward_loss(m, b, epoch++);
    benchmark::DoNotOptimize(loss.data());
    finish_iteration();
  }
  set_counters(state, m, batch);
}

void BM_wick_dit_forward_backward(benchmark::State& state) {
  const int64_t batch = state.range(0);
  QuickstartModel m = make_model();
  RandomBatch b = random_batch(batch);
  uint64_t epoch = 0;
  for (auto _ : state) {
    autograd::GradientStore grads = autograd::backward(forward_loss(m, b, epoch++));
    benchmark::DoNotOptimize(grads.size());
    finish_iteration();
  }
  set_counters(state, m, batch);
}

void BM_wick_dit_optimizer(benchmark::State& state) {
  const int64_t batch = state.range(0);
  QuickstartModel m = make_model();
  RandomBatch b = random_batch(batch);
  autograd::GradientStore grads = autograd::backward(forward_loss(m, b, 0));
  for (auto _ : state) {
    benchmark::DoNotOptimize(m.optimizer->step(grads, 1e-3f).grad_norm);
    finish_iteration();
  }
  set_counters(state, m, batch);
}

// The packed dataset the loader benchmarks read: written once per process into a private temporary
// folder (removed by main); empty when Fashion-MNIST is not installed.
struct PackedData {
  fs::path dir;
  std::string path, missing;
};

std::optional<PackedData>& packed_storage() {
  static std::optional<PackedData> data;
  return data;
}

const PackedData& packed_data() {
  std::optional<PackedData>& data = packed_storage();
  if (!data) data = [] {
    PackedData d;
    const fs::path images = fs::path(fashion_mnist_dir()) / "train-images-idx3-ubyte.gz";
    if (!fs::exists(images)) {
      d.missing = images.string() + " not found: apt-get install dataset-fashion-mnist (or set WICK_FASHION_MNIST_DIR)";
      return d;
    }
    d.dir = fs::temp_directory_path() / ("wick_dit_bench_" + std::to_string(::getpid()));
    fs::create_directories(d.dir);
    d.path = (d.dir / "fashion.h5").string();
    pack_fashion_mnist({.out = d.path, .split = "train", .limit = 2000, .force = true, .progress = false});
    return d;
  }();
  return *data;
}

std::unique_ptr<Prefetcher> open_loader(const std::string& path, int64_t batch) {
  auto dataset = LatentDataset::open(path);
  std::vector<int64_t> ids = select_ids(*dataset, {});
  std::vector<int64_t> buckets;
  for (int64_t id : ids) buckets.push_back(dataset->bucket_of(id));
  return std::make_unique<Prefetcher>(dataset, DistributedSampler(ids, buckets, {.seed = kSeed, .batch_size = batch}),
                                      PrefetchOptions{.depth = 2, .device = setup().device});
}

void BM_wick_loader(benchmark::State& state) {
  const int64_t batch = state.range(0);
  const PackedData& data = packed_data();
  if (data.path.empty()) {
    state.SkipWithError(data.missing.c_str());
    return;
  }
  std::unique_ptr<Prefetcher> loader = open_loader(data.path, batch);
  loader->next();  // the first batch pays the file's opening
  for (auto _ : state) {
    benchmark::DoNotOptimize(loader->next().latents.data());
    finish_iteration();
  }
  state.counters["samples/s"] =
      benchmark::Counter(static_cast<double>(batch), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_wick_dit_step_loaded(benchmark::State& state) {
  const int64_t batch = state.range(0);
  const PackedData& data = packed_data();
  if (data.path.empty()) {
    state.SkipWithError(data.missing.c_str());
    return;
  }
  std::unique_ptr<Prefetcher> loader = open_loader(data.path, batch);
  const LatentDatasetAttributes attributes = LatentDataset::open(data.path)->attributes();
  QuickstartModel m = make_model();
  loader->next();
  for (auto _ : state) {
    Batch loaded = loader->next();
    const int64_t epoch = batch_epoch(loaded);
    Tensor x0 = Objective::scale_latents(loaded.latents, attributes);
    diffusion::Conditioning cond = drop_captions(loaded, 0.1, kSeed, epoch);
    std::vector<uint64_t> ids(loaded.ids.begin(), loaded.ids.end());
    diffusion::FlowMatchingBatch fb = diffusion::make_flow_batch(x0, ids, static_cast<uint64_t>(epoch), kSeed, m.flow);
    Tensor loss = predict_and_loss(m, fb, cond.context, cond.context_mask, cond.pooled);
    autograd::GradientStore grads = autograd::backward(loss);
    m.optimizer->step(grads, 1e-3f);
    benchmark::DoNotOptimize(loss.data());
    finish_iteration();
  }
  set_counters(state, m, batch);
}

}  // namespace

int main(int argc, char** argv) {
  // Registered here: the batch comes from the environment (WICK_BENCH_BATCH).
  int64_t batch = 0;
  try {
    batch = setup().batch;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cpu_dit_step_bench: %s\n", e.what());
    return 2;
  }
  for (auto [name, fn] : std::vector<std::pair<const char*, void (*)(benchmark::State&)>>{
           {"BM_wick_dit_step", BM_wick_dit_step},
           {"BM_wick_dit_forward", BM_wick_dit_forward},
           {"BM_wick_dit_forward_backward", BM_wick_dit_forward_backward},
           {"BM_wick_dit_optimizer", BM_wick_dit_optimizer},
           {"BM_wick_loader", BM_wick_loader},
           {"BM_wick_dit_step_loaded", BM_wick_dit_step_loaded}})
    benchmark::RegisterBenchmark(name, fn)->Arg(batch)->Unit(benchmark::kMillisecond)->UseRealTime();
  const int rc = wick::bench::run_with_ratios(argc, argv, {{"wick_dit_step_loaded", "wick_dit_step"}});
  if (const auto& data = packed_storage(); data && !data->dir.empty()) {
    std::error_code error;
    fs::remove_all(data->dir, error);
  }
  return rc;
}
