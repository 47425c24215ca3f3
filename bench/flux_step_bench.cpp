// Full-size Flux.1-dev LoRA training step: the wick side of bench/gpu/flux_vs_diffusers.py.
//
//   build/bench/flux_step_bench                       # cuda:0, bf16, 19 + 38 blocks, 1024² (4096 + 512 tokens)
//   build/bench/flux_step_bench --steps 5 --warmup 2 --json out.json [--no-checkpointing] [--rank 16]
//   build/bench/flux_step_bench --depth 2 --depth-single 4          # a shallower model, same widths
//   build/bench/flux_step_bench --device cpu                        # tiny smoke run (see tiny_defaults)
//   mpirun -np 2 build/bench/flux_step_bench --shard-weights        # the blocks' weights sharded over the ranks
//
// --shard-weights (distributed.shard: weights, engine/block_swap.h "Sharded"): under a launcher the blocks' frozen
// weights are cut among the ranks (NCCL on CUDA, also alone: an NCCL group of one rank; MPI on the CPU, alone the
// single group) and gathered
// as each block runs; every rank runs the same step. Reported besides: the gathers per step, the bytes received, the
// time one blocking all-gather of each block takes on its own (the gathers' cost if nothing hid them) and the time
// the steps waited for gathers, so the share of the gathers hidden behind compute. The step time against the
// unsharded run (the same command without --shard-weights) is the traffic's cost.
//
// The step, as a Flux LoRA trainer runs it: flux::FluxTransformer (models/flux/flux.h) in bf16 with
// random weights (built with initialize = false, then every weight filled on the device with
// N(0, 0.02), biases zero, RMSNorm scales one), LoRA rank 16 alpha 16 on every Linear of both block
// kinds ({"double_blocks.*", "single_blocks.*"}: modulations, qkv, proj, MLPs, linear1/linear2),
// gradient checkpointing per block, adamw8bit over the adapters (lr 1e-4, weight decay 1e-2).
// Inputs: latents [1, 16, S, S] (S = --tokens-side, 128 for 1024² images: 64 x 64 = 4096 packed
// tokens), T5 context [1, 512, 4096], CLIP pooled [1, 768], guidance 1.0, σ from the Flux-shifted
// logit-normal and the flow-matching target ε − x0 (models/diffusion/flow_matching.h). A step =
// forward + f32 MSE + backward + optimizer step, timed on the host around a device synchronize.
//
// FLOPs (flux_step_flops below; every Linear counted for the rows it really sees, which matters:
// each double-block stream's weights see only that stream's tokens and the modulations see one row
// per sample, so 2·params·tokens + attention, 1.24e14 at full size, is 1.66x the real forward):
//   forward   Σ_linear 2·rows·in·out + Σ_LoRA 2·rows·r·(in+out) + Σ_block 4·L²·hidden (QKᵀ and PV)
//   backward  Σ_linear 2·rows·in·out for the input gradient only (frozen base: no weight gradient;
//             none for the modulations, whose input SiLU(vec) needs no gradient, or the embedders)
//             + Σ_LoRA 4·rows·r·(in+out) + 2.5 x the attention forward (QKᵀ recomputed, dV, dP, dQ, dK)
//   recompute the blocks' forward again with checkpointing
//   model FLOPs = forward + backward (MFU, PaLM's definition: recomputation not counted);
//   hardware FLOPs = model + recompute (HFU); MFU/HFU against 989 TFLOP/s (H100 SXM dense bf16).
//   floor = hardware FLOPs / the bf16 8192³ matmul rate measured in the same run (CPU: f32 512³).
// Full size (1024², checkpointing): model 1.722e14, hardware 2.469e14 (forward 7.48e13, backward
// 9.74e13, recompute 7.48e13), so the floor is 0.31 s per step at the ~790 TFLOP/s an H100 reached
// on an 8192³ bf16 matmul here (bench/results/2026-11-22-gpu-h100.md), 0.25 s at 989.
// Memory: peak bytes held by tensors (runtime/memory.h) over the first step (the optimizer state is
// allocated there) and over the timed steps after the warm-up (steady), the weights alone, and on
// CUDA the device memory in use at the end (cudaMemGetInfo: the allocator's pool, context, cuBLAS).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "comm/launch_env.h"
#include "engine/autograd/backward.h"
#include "engine/block_swap.h"
#include "engine/autograd/ops_layout.h"
#include "engine/init.h"
#include "engine/optim/optimizer.h"
#include "models/diffusion/flow_matching.h"
#include "models/flux/flux.h"
#include "models/model_factory.h"
#include "models/nn/adapters.h"
#include "runtime/device.h"
#include "runtime/error.h"
#include "runtime/memory.h"
#include "runtime/ops/copy.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/matmul.h"
#include "runtime/ops/random.h"

#if WICK_HAS_CUDA
#include <cuda_runtime.h>
#endif

namespace {

using namespace wick;
using Clock = std::chrono::steady_clock;

constexpr double kPeakFlops = 989e12;  // H100 SXM dense bf16
constexpr float kLearningRate = 1e-4f;
constexpr uint64_t kSeed = 7;

struct Options {
  std::string device = "cuda";
  std::string dtype;           // bf16 on cuda, f32 on cpu unless given
  std::string optimizer = "adamw8bit";
  std::string json_path;
  int steps = -1, warmup = -1;  // 5 and 2 on cuda, 3 and 1 on cpu unless given
  bool checkpointing = true;
  int64_t rank = 16;
  double alpha = -1;            // = rank unless given
  int64_t side = -1;            // latent side in pixels (128 on cuda: 1024² images)
  int64_t text_len = -1;        // T5 tokens (512 on cuda)
  int64_t depth = -1, depth_single = -1, hidden = -1, heads = -1;
  bool shard_weights = false;
};

// --device cpu: hidden 128, 1 head of 128 (the RoPE axes 16 + 56 + 56), 1 + 1 blocks, 16 x 16
// latents (64 image tokens), 8 text tokens, f32; the context and pooled widths stay Flux's.
void apply_defaults(Options& o) {
  const bool tiny = o.device == "cpu";
  auto set = [](auto& field, auto value) {
    if (field < 0) field = value;
  };
  set(o.steps, tiny ? 3 : 5);
  set(o.warmup, tiny ? 1 : 2);
  set(o.side, int64_t{tiny ? 16 : 128});
  set(o.text_len, int64_t{tiny ? 8 : 512});
  set(o.depth, int64_t{tiny ? 1 : 19});
  set(o.depth_single, int64_t{tiny ? 1 : 38});
  set(o.hidden, int64_t{tiny ? 128 : 3072});
  set(o.heads, int64_t{tiny ? 1 : 24});
  if (o.alpha < 0) o.alpha = static_cast<double>(o.rank);
  if (o.dtype.empty()) o.dtype = tiny ? "f32" : "bf16";
}

const char* kUsage =
    "usage: flux_step_bench [--device cuda|cpu] [--dtype bf16|f32] [--steps N] [--warmup N]\n"
    "         [--no-checkpointing] [--rank R] [--alpha A] [--optimizer adamw8bit|adamw]\n"
    "         [--tokens-side S] [--text-len L] [--depth N] [--depth-single N] [--hidden W] [--heads H]\n"
    "         [--json PATH] [--shard-weights]\n";

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--no-checkpointing") {
      o.checkpointing = false;
      continue;
    }
    if (arg == "--shard-weights") {
      o.shard_weights = true;
      continue;
    }
    if (arg == "--help" || arg == "-h") {
      std::printf("%s", kUsage);
      std::exit(0);
    }
    static const char* kWithValue[] = {"--device", "--dtype", "--optimizer", "--json", "--steps", "--warmup",
                                       "--rank", "--alpha", "--tokens-side", "--text-len", "--depth",
                                       "--depth-single", "--hidden", "--heads"};
    if (std::none_of(std::begin(kWithValue), std::end(kWithValue), [&arg](const char* name) { return arg == name; })) {
      std::fprintf(stderr, "flux_step_bench: unknown option %s\n%s", arg.c_str(), kUsage);
      return false;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "flux_step_bench: %s needs a value\n%s", arg.c_str(), kUsage);
      return false;
    }
    const char* value = argv[++i];
    if (arg == "--device") o.device = value;
    else if (arg == "--dtype") o.dtype = value;
    else if (arg == "--optimizer") o.optimizer = value;
    else if (arg == "--json") o.json_path = value;
    else if (arg == "--steps") o.steps = std::atoi(value);
    else if (arg == "--warmup") o.warmup = std::atoi(value);
    else if (arg == "--rank") o.rank = std::atoll(value);
    else if (arg == "--alpha") o.alpha = std::atof(value);
    else if (arg == "--tokens-side") o.side = std::atoll(value);
    else if (arg == "--text-len") o.text_len = std::atoll(value);
    else if (arg == "--depth") o.depth = std::atoll(value);
    else if (arg == "--depth-single") o.depth_single = std::atoll(value);
    else if (arg == "--hidden") o.hidden = std::atoll(value);
    else if (arg == "--heads") o.heads = std::atoll(value);
  }
  if (o.device != "cuda" && o.device != "cpu") {
    std::fprintf(stderr, "flux_step_bench: --device must be cuda or cpu, got %s\n", o.device.c_str());
    return false;
  }
  apply_defaults(o);
  if (o.dtype != "bf16" && o.dtype != "f32") {
    std::fprintf(stderr, "flux_step_bench: --dtype must be bf16 or f32, got %s\n", o.dtype.c_str());
    return false;
  }
  if (o.steps < 1 || o.warmup < 0 || o.rank < 1 || o.side < 2 || o.side % 2 != 0 || o.text_len < 1 || o.depth < 0 ||
      o.depth_single < 0 || o.hidden < 1 || o.heads < 1) {
    std::fprintf(stderr,
                 "flux_step_bench: need --steps >= 1, --warmup >= 0, --rank >= 1, an even --tokens-side >= 2, "
                 "--text-len >= 1, depths >= 0, --hidden and --heads >= 1\n");
    return false;
  }
  return true;
}

// The FLOPs of one step, by the formula in the header comment.
struct StepFlops {
  double forward_blocks = 0;  // the blocks' linears, LoRA and attention: what checkpointing recomputes
  double forward_other = 0;   // embedders and the final layer
  double backward = 0;
  double recompute = 0;
  double model() const { return forward_blocks + forward_other + backward; }
  double hardware() const { return model() + recompute; }
};

StepFlops flux_step_flops(const flux::FluxConfig& c, double image_tokens, double text_tokens, double rank,
                          bool checkpointing) {
  const double h = static_cast<double>(c.hidden_size), m = static_cast<double>(c.mlp_hidden());
  const double length = image_tokens + text_tokens;
  auto linear = [](double rows, double in, double out) { return 2 * rows * in * out; };
  auto lora = [rank](double rows, double in, double out) { return 2 * rows * rank * (in + out); };
  StepFlops f;
  double block_base = 0, block_mod = 0, block_lora = 0, attention = 0;
  for (int64_t i = 0; i < c.depth; ++i) {
    for (double rows : {image_tokens, text_tokens}) {
      block_base += linear(rows, h, 3 * h) + linear(rows, h, h) + linear(rows, h, m) + linear(rows, m, h);
      block_lora += lora(rows, h, 3 * h) + lora(rows, h, h) + lora(rows, h, m) + lora(rows, m, h);
      block_mod += linear(1, h, 6 * h);
      block_lora += lora(1, h, 6 * h);
    }
    attention += 4 * length * length * h;
  }
  for (int64_t i = 0; i < c.depth_single; ++i) {
    block_base += linear(length, h, 3 * h + m) + linear(length, h + m, h);
    block_lora += lora(length, h, 3 * h + m) + lora(length, h + m, h);
    block_mod += linear(1, h, 3 * h);
    block_lora += lora(1, h, 3 * h);
    attention += 4 * length * length * h;
  }
  f.forward_blocks = block_base + block_mod + block_lora + attention;
  const double final_linear = linear(image_tokens, h, static_cast<double>(c.in_channels));
  f.forward_other = linear(image_tokens, static_cast<double>(c.in_channels), h) +
                    linear(text_tokens, static_cast<double>(c.context_dim), h) +
                    linear(1, 256, h) * (c.guidance_embed ? 2 : 1) + linear(1, static_cast<double>(c.vec_dim), h) +
                    linear(1, h, h) * (c.guidance_embed ? 3 : 2) + linear(1, h, 2 * h) + final_linear;
  f.backward = block_base + 2 * block_lora + 2.5 * attention + final_linear;
  f.recompute = checkpointing ? f.forward_blocks : 0;
  return f;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// --shard-weights: what the timed steps gathered, and each block's all-gather timed alone (blocking, 3 times,
// the median) over the same group, for the part of the gathers the steps did not wait for.
void report_gathers(const BlockSwapper& shards, comm::ProcessGroup& group, const BlockSwapper::Stats& before,
                    int steps, Device device) {
  const BlockSwapper::Stats after = shards.stats();
  const double per_step = 1.0 / static_cast<double>(steps);
  const double gathers = static_cast<double>(after.n_block_copies - before.n_block_copies) * per_step;
  const double waited = (after.wait_s - before.wait_s) * per_step;
  // A step gathers each block about gathers / n_blocks times.
  double alone = 0;
  for (int k = 0; k < shards.n_blocks(); ++k) {
    Tensor mine = zeros({shards.shard_bytes(k) / 4}, DType::F32, device);
    Tensor whole = Tensor::empty({shards.block_bytes(k) / 4}, DType::F32, device);
    std::vector<double> times;
    for (int i = 0; i < 3; ++i) {
      synchronize(device);
      const auto start = Clock::now();
      group.all_gather(mine, whole);
      synchronize(device);
      times.push_back(seconds_since(start));
    }
    alone += median(times);
  }
  alone *= gathers / static_cast<double>(shards.n_blocks());
  std::printf("flux_step_bench: gathers: %.1f blocks and %.3f GB received per step; alone (blocking) they take "
              "%.1f ms per step, the steps waited %.1f ms for them: %.0f%% hidden\n",
              gathers, static_cast<double>(after.bytes_copied - before.bytes_copied) * per_step / 1e9, alone * 1e3,
              waited * 1e3, alone > 0 ? 100.0 * std::max(0.0, 1.0 - waited / alone) : 0.0);
}

// Every parameter of the freshly built (uninitialized) model: weights N(0, 0.02), biases 0, the
// RMSNorm scales (made as ones) left alone. Each fill runs on the parameter's device.
void fill_random_weights(Module& model) {
  uint64_t index = 0;
  for (auto& [name, parameter] : model.named_parameters()) {
    auto ends_with = [&name](const char* suffix) {
      size_t n = std::strlen(suffix);
      return name.size() >= n && name.compare(name.size() - n, n, suffix) == 0;
    };
    if (ends_with(".scale")) continue;
    if (ends_with(".bias")) {
      copy_into(parameter, zeros(parameter.shape(), parameter.dtype(), parameter.device()));
      continue;
    }
    copy_into(parameter, normal(parameter.shape(), 0.0, 0.02, derive_stream(kSeed, index++, 0, RngPurpose::Init),
                                parameter.dtype(), parameter.device()));
  }
}

// Seconds of one n x n x n matmul in `dtype` on `device` (median of 10 after 3 warm-ups).
double matmul_seconds(int64_t n, DType dtype, Device device) {
  Tensor a = randn({n, n}, derive_stream(11, 0, 0, RngPurpose::Test), dtype, device);
  Tensor b = randn({n, n}, derive_stream(12, 0, 0, RngPurpose::Test), dtype, device);
  Tensor c;
  std::vector<double> seconds;
  for (int i = 0; i < 13; ++i) {
    synchronize(device);
    auto start = Clock::now();
    c = wick::matmul(a, b);
    synchronize(device);
    if (i >= 3) seconds.push_back(seconds_since(start));
  }
  return median(seconds);
}

int64_t device_bytes_in_use(Device device) {
#if WICK_HAS_CUDA
  if (device.is_cuda()) {
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) return static_cast<int64_t>(total_bytes - free_bytes);
  }
#endif
  (void)device;
  return -1;
}

struct Result {
  std::vector<double> step_s, losses;
  double build_s = 0, first_step_s = 0, matmul_flops_per_s = 0;
  int64_t n_parameters = 0, n_trainable = 0, n_adapters = 0, weights_bytes = 0, peak_first_bytes = 0,
          peak_steady_bytes = 0, device_in_use_bytes = -1;
  bool guard_ok = true;
};

void print_json(const Options& o, const flux::FluxConfig& c, const StepFlops& f, double image_tokens,
                double text_tokens, const Result& r, FILE* out) {
  const double step_s = median(r.step_s);
  auto list = [out](const char* key, const std::vector<double>& values, double scale) {
    std::fprintf(out, "  \"%s\": [", key);
    for (size_t i = 0; i < values.size(); ++i) {
      if (std::isfinite(values[i])) std::fprintf(out, "%s%.9g", i ? ", " : "", values[i] * scale);
      else std::fprintf(out, "%sNaN", i ? ", " : "");  // Python's json reads NaN, not printf's nan
    }
    std::fprintf(out, "],\n");
  };
  std::fprintf(out, "{\n  \"program\": \"flux_step_bench\",\n  \"device\": \"%s\",\n  \"dtype\": \"%s\",\n",
               o.device.c_str(), o.dtype.c_str());
  std::fprintf(out,
               "  \"hidden\": %lld,\n  \"heads\": %lld,\n  \"depth\": %lld,\n  \"depth_single\": %lld,\n"
               "  \"image_tokens\": %.0f,\n  \"text_tokens\": %.0f,\n  \"rank\": %lld,\n  \"alpha\": %g,\n"
               "  \"checkpointing\": %s,\n  \"optimizer\": \"%s\",\n  \"steps\": %d,\n  \"warmup\": %d,\n",
               static_cast<long long>(c.hidden_size), static_cast<long long>(c.num_heads),
               static_cast<long long>(c.depth), static_cast<long long>(c.depth_single), image_tokens, text_tokens,
               static_cast<long long>(o.rank), o.alpha, o.checkpointing ? "true" : "false", o.optimizer.c_str(),
               o.steps, o.warmup);
  std::fprintf(out, "  \"lora_dtype\": \"f32\",\n");  // adapters keep f32 factors, cast to the compute dtype
  std::fprintf(out, "  \"n_parameters\": %lld,\n  \"n_trainable\": %lld,\n  \"n_adapters\": %lld,\n",
               static_cast<long long>(r.n_parameters), static_cast<long long>(r.n_trainable),
               static_cast<long long>(r.n_adapters));
  list("step_ms", r.step_s, 1e3);
  list("losses", r.losses, 1.0);
  std::fprintf(out,
               "  \"median_ms\": %.6g,\n  \"first_step_ms\": %.6g,\n  \"build_s\": %.4g,\n"
               "  \"tokens_per_s\": %.6g,\n  \"model_flops\": %.17g,\n  \"hardware_flops\": %.17g,\n"
               "  \"mfu\": %.6g,\n  \"hfu\": %.6g,\n  \"matmul_tflops\": %.6g,\n  \"floor_ms\": %.6g,\n",
               step_s * 1e3, r.first_step_s * 1e3, r.build_s, (image_tokens + text_tokens) / step_s, f.model(),
               f.hardware(), f.model() / step_s / kPeakFlops, f.hardware() / step_s / kPeakFlops,
               r.matmul_flops_per_s / 1e12, f.hardware() / r.matmul_flops_per_s * 1e3);
  std::fprintf(out,
               "  \"weights_bytes\": %lld,\n  \"peak_first_step_bytes\": %lld,\n  \"peak_steady_bytes\": %lld,\n"
               "  \"device_in_use_bytes\": %lld,\n  \"guard_ok\": %s\n}\n",
               static_cast<long long>(r.weights_bytes), static_cast<long long>(r.peak_first_bytes),
               static_cast<long long>(r.peak_steady_bytes), static_cast<long long>(r.device_in_use_bytes),
               r.guard_ok ? "true" : "false");
}

int run(const Options& o) {
  const Device device = o.device == "cuda" ? Device::cuda(0) : Device::cpu();
  const DType dtype = o.dtype == "bf16" ? DType::BF16 : DType::F32;
  flux::FluxConfig c;
  c.hidden_size = o.hidden;
  c.num_heads = o.heads;
  c.depth = o.depth;
  c.depth_single = o.depth_single;
  c.initialize = false;
  c.gradient_checkpointing = o.checkpointing;
  c.dtype = dtype;
  c.device = device;
  const double image_tokens = static_cast<double>((o.side / 2) * (o.side / 2));
  const double text_tokens = static_cast<double>(o.text_len);
  const StepFlops flops = flux_step_flops(c, image_tokens, text_tokens, static_cast<double>(o.rank), o.checkpointing);
  Result r;

  // The model, its adapters and optimizer, the inputs.
  auto start = Clock::now();
  set_init_seed(kSeed);
  auto model = std::make_shared<flux::FluxTransformer>(c);
  fill_random_weights(*model);
  synchronize(device);
  r.weights_bytes = memory_stats(device).current_bytes;
  nn::AdapterReport adapters = nn::apply_adapters(
      *model, {.type = "lora", .patterns = {"double_blocks.*", "single_blocks.*"}, .options = {.rank = o.rank, .alpha = o.alpha}});
  r.n_adapters = static_cast<int64_t>(adapters.wrapped.size());
  // Sharded: the gathers' own group, and one for the blocking measurement below.
  std::shared_ptr<comm::ProcessGroup> gathers;
  std::shared_ptr<BlockSwapper> shards;
  if (o.shard_weights) {
    const int64_t held_before = memory_stats(device).current_bytes;  // weights and adapters
    // On CUDA through NCCL even alone (an NCCL group of one rank): the GPU's own gather path.
    gathers = comm::make_process_group(device.is_cuda() ? "nccl" : "auto", device, 600);
    shards = attach_weight_shards(*model, gathers, device);
    int64_t mine = 0;
    for (int k = 0; k < shards->n_blocks(); ++k) mine += shards->shard_bytes(k);
    std::printf("flux_step_bench: rank %d of %d (%s): the %d blocks' frozen weights sharded, %.3f GB on this rank; "
                "tensors held (weights and adapters) %.3f GB, %.3f GB before\n",
                gathers->rank(), gathers->size(), gathers->backend().c_str(), shards->n_blocks(),
                static_cast<double>(mine) / 1e9, static_cast<double>(memory_stats(device).current_bytes) / 1e9,
                static_cast<double>(held_before) / 1e9);
  }
  r.n_trainable = model->n_parameters(true);
  r.n_parameters = model->n_parameters();
  std::unique_ptr<Optimizer> optimizer =
      make_optimizer(o.optimizer, model->trainable_parameters(), {.weight_decay = 1e-2f});
  Tensor latents = randn({1, c.latent_channels(), o.side, o.side}, derive_stream(kSeed, 1, 0, RngPurpose::Test), dtype,
                         device);
  Tensor context = randn({1, o.text_len, c.context_dim}, derive_stream(kSeed, 2, 0, RngPurpose::Test), dtype, device);
  Tensor pooled = randn({1, c.vec_dim}, derive_stream(kSeed, 3, 0, RngPurpose::Test), dtype, device);
  Tensor guidance = Tensor::from_vector<float>({1.0f}, {1}, device);
  diffusion::FlowMatchingConfig flow{.shift = diffusion::SigmaShift::Resolution};
  synchronize(device);
  r.build_s = seconds_since(start);
  std::printf("flux_step_bench: %s on %s: %.3fB parameters (%.2f GB), %lld LoRA adapters r%lld (%.2fM trainable), "
              "built in %.1f s\n",
              model->summary().c_str(), device.str().c_str(), static_cast<double>(r.n_parameters) / 1e9,
              static_cast<double>(r.weights_bytes) / 1e9, static_cast<long long>(r.n_adapters),
              static_cast<long long>(o.rank), static_cast<double>(r.n_trainable) / 1e6, r.build_s);
  std::printf("flux_step_bench: %.0f image + %.0f text tokens, checkpointing %s, %s; FLOPs per step: model %.4g "
              "(forward %.4g, backward %.4g), recompute %.4g, hardware %.4g\n",
              image_tokens, text_tokens, o.checkpointing ? "on" : "off", o.optimizer.c_str(), flops.model(),
              flops.forward_blocks + flops.forward_other, flops.backward, flops.recompute, flops.hardware());
  std::fflush(stdout);

  // One step; returns the gradients of the first (for the guard).
  auto step = [&](int64_t index, autograd::GradientStore* keep) {
    diffusion::FlowMatchingBatch batch = diffusion::make_flow_batch(latents, {static_cast<uint64_t>(index)}, 0, kSeed, flow);
    Tensor pred = model->forward(batch.x_t, batch.sigma, context, pooled, guidance);
    Tensor loss = diffusion::flow_matching_loss(autograd::to_dtype(pred, DType::F32), batch.target.to(DType::F32));
    autograd::GradientStore grads = autograd::backward(loss);
    optimizer->step(grads, kLearningRate);
    r.losses.push_back(loss.item());
    if (keep != nullptr) *keep = std::move(grads);
  };

  // The first step (cuDNN plans, cuBLAS heuristics, the optimizer state), then the rest of the warm-up.
  reset_peak_memory(device);
  autograd::GradientStore first;
  start = Clock::now();
  step(0, &first);
  synchronize(device);
  r.first_step_s = seconds_since(start);
  r.peak_first_bytes = memory_stats(device).peak_bytes;
  // Guard: every adapter's up factor (zero at the start) got a nonzero finite gradient in step 1.
  int64_t n_missing = 0;
  for (auto& [path, adapter] : nn::find_adapters(*model)) {
    Tensor g = first.get(adapter->up_weight());
    double norm = 0;
    if (g.defined())
      for (float v : g.to_vector<float>())
        norm = std::isfinite(v) ? std::max(norm, std::fabs(static_cast<double>(v))) : NAN;
    if (!(norm > 0 && std::isfinite(norm))) {
      if (n_missing++ < 5) std::fprintf(stderr, "guard FAILED: %s.lora_up.weight gradient max|g| = %g\n", path.c_str(), norm);
      r.guard_ok = false;
    }
  }
  first.clear();
  std::printf("flux_step_bench: first step %.1f ms, peak %.2f GB\n", r.first_step_s * 1e3,
              static_cast<double>(r.peak_first_bytes) / 1e9);
  std::fflush(stdout);
  for (int i = 1; i < o.warmup; ++i) step(i, nullptr);
  synchronize(device);
  reset_peak_memory(device);
  const BlockSwapper::Stats before_timed = shards ? shards->stats() : BlockSwapper::Stats{};
  for (int i = 0; i < o.steps; ++i) {
    synchronize(device);
    start = Clock::now();
    step(o.warmup + i, nullptr);
    synchronize(device);
    r.step_s.push_back(seconds_since(start));
  }
  r.peak_steady_bytes = memory_stats(device).peak_bytes;
  r.device_in_use_bytes = device_bytes_in_use(device);
  if (shards) report_gathers(*shards, *gathers, before_timed, o.steps, device);
  for (double loss : r.losses)
    if (!std::isfinite(loss)) {
      std::fprintf(stderr, "guard FAILED: a loss is not finite\n");
      r.guard_ok = false;
      break;
    }

  const int64_t n = device.is_cuda() ? 8192 : 512;
  r.matmul_flops_per_s = 2.0 * static_cast<double>(n * n * n) / matmul_seconds(n, dtype, device);

  const double step_s = median(r.step_s);
  std::printf("flux_step_bench: losses");
  for (double loss : r.losses) std::printf(" %.6f", loss);
  std::printf("\nflux_step_bench: median step %.1f ms over %d steps (first %.1f ms), %.0f tokens/s\n", step_s * 1e3,
              o.steps, r.first_step_s * 1e3, (image_tokens + text_tokens) / step_s);
  std::printf("flux_step_bench: MFU %.3f, HFU %.3f (vs %.0f TFLOP/s); matmul %dx%dx%d %s %.1f TFLOP/s; "
              "floor %.1f ms (hardware FLOPs / matmul rate): step = %.2fx the floor\n",
              flops.model() / step_s / kPeakFlops, flops.hardware() / step_s / kPeakFlops, kPeakFlops / 1e12,
              static_cast<int>(n), static_cast<int>(n), static_cast<int>(n), o.dtype.c_str(),
              r.matmul_flops_per_s / 1e12, flops.hardware() / r.matmul_flops_per_s * 1e3,
              step_s / (flops.hardware() / r.matmul_flops_per_s));
  std::printf("flux_step_bench: memory: weights %.2f GB, peak first step %.2f GB, peak steady %.2f GB",
              static_cast<double>(r.weights_bytes) / 1e9, static_cast<double>(r.peak_first_bytes) / 1e9,
              static_cast<double>(r.peak_steady_bytes) / 1e9);
  if (r.device_in_use_bytes >= 0)
    std::printf(", device in use %.2f GB", static_cast<double>(r.device_in_use_bytes) / 1e9);
  std::printf("\nflux_step_bench: guard %s\n", r.guard_ok ? "ok" : "FAILED");
  if (!o.json_path.empty()) {
    FILE* out = std::fopen(o.json_path.c_str(), "w");
    WICK_CHECK(out != nullptr, "flux_step_bench: cannot write ", o.json_path);
    print_json(o, c, flops, image_tokens, text_tokens, r, out);
    std::fclose(out);
  }
  return r.guard_ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (!parse(argc, argv, options)) return 2;
  if (options.device == "cuda" && cuda_device_count() == 0) {
    std::printf("flux_step_bench: no CUDA device on this machine; nothing measured (--device cpu runs the tiny model)\n");
    return 0;
  }
  try {
    return run(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flux_step_bench: error: %s\n", e.what());
    return 1;
  }
}
