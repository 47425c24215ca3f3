// How much of the gradient all-reduce the buckets hide under backward, on a stack of transformer
// blocks (the DiT of models/dit, hidden 256, depth 8: 9.85M parameters, 39 MB of f32 gradients).
//
//   mpirun --oversubscribe -np 2 build/bench/overlap_bench [--steps 10] [--bucket-mb 4] [--zero 1]
//   build/bench/overlap_bench --device cuda [--zero 1]    # one GPU: an NCCL group of one rank
//
// Per step, each rank runs forward + backward with the buckets armed (collectives start during
// backward) and finish(); the same without arming (every collective after backward); and
// backward alone (no communication). With T_b = backward alone, T_c = the collectives alone
// (unarmed time - T_b), T_o = the armed time: hidden fraction = (T_b + T_c - T_o) / T_c.
// "unarmed finish()" times finish() alone after an unarmed backward (gradient copies, every
// collective, the division): the communication measured directly, less exposed to a busy machine
// than T_c. --zero 1 shards the optimizer first (ZeRO-1), so the buckets reduce-scatter into each
// rank's range instead of all-reducing. One optimizer step (AdamW, clipping on; sharded: the norm's
// gather and the masters' all-gather included) is timed as well. Medians over the steps, the
// slowest rank's times; printed on rank 0.
//
// --device cuda: the model on the GPU and an NCCL group (of one rank without a launcher, else one
// per node-local GPU); every phase ends with a device synchronize. With one rank NCCL's collectives
// are local (in place: nothing to move), so the numbers measure what the bucket machinery costs on
// CUDA streams (gradient copies, events, the NCCL stream and finish()), not communication hidden.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "comm/launch_env.h"
#include "engine/autograd/backward.h"
#include "engine/autograd/ops_loss.h"
#include "engine/distributed/gradient_buckets.h"
#include "engine/distributed/zero.h"
#include "engine/init.h"
#include "engine/optim/optimizer.h"
#include "models/dit/dit.h"
#include "runtime/error.h"
#include "runtime/ops/random.h"

using namespace wick;

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double slowest(comm::ProcessGroup& group, double seconds) {
  Tensor t = Tensor::from_vector<double>({seconds}, {1}).to(group.device());
  group.all_reduce(t, comm::ReduceOp::Max);
  return t.to(Device::cpu()).to_vector<double>()[0];
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 10;
  int64_t bucket_mb = 4;
  bool zero = false;
  std::string device_name = "cpu";
  for (int i = 1; i < argc; i += 2) {
    if (i + 1 >= argc) {
      std::fprintf(stderr, "overlap_bench: %s needs a value\n", argv[i]);
      return 2;
    }
    if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--bucket-mb")) bucket_mb = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--zero")) zero = std::atoi(argv[i + 1]) != 0;
    else if (!std::strcmp(argv[i], "--device")) device_name = argv[i + 1];
    else {
      std::fprintf(stderr, "overlap_bench: unknown option %s (valid: --steps, --bucket-mb, --zero, --device)\n", argv[i]);
      return 2;
    }
  }
  try {
    Device device = parse_device(device_name);
    // CUDA: NCCL, also with one rank (make_process_group gives an NCCL group of one rank for "nccl").
    auto group = comm::make_process_group(device.is_cuda() ? "nccl" : "auto", device, 600);
    device = group->device();
    const int rank = group->rank();
    set_init_seed(1);
    DiT model(DiTConfig{.in_channels = 4, .input_size = 16, .patch_size = 2, .hidden_size = 256, .depth = 8,
                        .num_heads = 4, .text_dim = 64, .pooled_dim = 64, .device = device});
    auto optimizer = make_optimizer("adamw", model.trainable_parameters(), {.max_grad_norm = 1.0f});
    if (zero) shard_optimizer(*optimizer, *group);
    GradientBuckets buckets(*optimizer, *group, bucket_mb << 20);
    const int64_t batch = 8;
    auto noise = [&](const Shape& shape, uint64_t purpose) {
      return randn(shape, derive_stream(7, static_cast<uint64_t>(rank), purpose, RngPurpose::Test), DType::F32, device);
    };
    Tensor x = noise({batch, 4, 16, 16}, 0), target = noise({batch, 4, 16, 16}, 1);
    Tensor t = noise({batch}, 2), context = noise({batch, 8, 64}, 3), pooled = noise({batch, 64}, 4);
    Tensor mask = Tensor::from_vector<uint8_t>(std::vector<uint8_t>(batch * 8, 1), {batch, 8}).to(device);

    // mode 0: backward alone; 1: unarmed (collectives after backward); 2: armed (overlapped).
    // finish_seconds: the last finish() alone (unarmed: copies, every collective, the division).
    double finish_seconds = 0;
    int64_t launched_in_backward = 0;
    auto run = [&](int mode) {
      autograd::GradientStore store;
      group->barrier();
      synchronize(device);
      auto start = Clock::now();
      Tensor loss = autograd::mse_loss(model.forward(x, t, context, mask, pooled), target);
      if (mode > 0) buckets.arm(mode == 2);
      autograd::backward(loss, store);
      synchronize(device);
      auto finish_start = Clock::now();
      if (mode > 0) {
        BucketReport report = buckets.finish(store);
        if (mode == 2) launched_in_backward = report.n_launched_during_backward;
      }
      synchronize(device);
      finish_seconds = std::chrono::duration<double>(Clock::now() - finish_start).count();
      return std::chrono::duration<double>(Clock::now() - start).count();
    };
    run(0), run(1), run(2);  // warm-up
    // The optimizer step on the reduced gradient (lr 0: the weights stay as they are).
    auto step = [&] {
      group->barrier();
      synchronize(device);
      auto start = Clock::now();
      optimizer->step_reduced(0.0f);
      synchronize(device);
      return std::chrono::duration<double>(Clock::now() - start).count();
    };
    std::vector<double> alone, after, finished, overlapped, stepped;
    for (int s = 0; s < steps; ++s) {
      alone.push_back(slowest(*group, run(0)));
      after.push_back(slowest(*group, run(1)));
      finished.push_back(slowest(*group, finish_seconds));
      overlapped.push_back(slowest(*group, run(2)));
      stepped.push_back(slowest(*group, step()));
    }
    double tb = median(alone), tu = median(after), to = median(overlapped), tc = std::max(0.0, tu - tb);
    if (rank == 0) {
      const char* collective = buckets.reduce_scatters() ? "reduce-scatter" : "all-reduce";
      std::printf("overlap_bench: %s on %s, %d rank%s, DiT hidden 256 depth 8 (%lld parameters), batch %lld per "
                  "rank, %lld buckets of ~%lld MB (%s; %lld started during backward), optimizer state %s, %d steps "
                  "(medians, slowest rank)\n\n",
                  group->backend().c_str(), device.str().c_str(), group->size(), group->size() == 1 ? "" : "s",
                  static_cast<long long>(model.n_parameters()), static_cast<long long>(batch),
                  static_cast<long long>(buckets.n_buckets()), static_cast<long long>(bucket_mb), collective,
                  static_cast<long long>(launched_in_backward), optimizer->sharded() ? "sharded (ZeRO-1)" : "replicated",
                  steps);
      std::printf("| forward+backward alone | + %s after | + buckets during backward | %s alone | hidden | "
                  "unarmed finish() | optimizer step |\n", collective, collective);
      std::printf("|---|---|---|---|---|---|---|\n");
      std::printf("| %.1f ms | %.1f ms | %.1f ms | %.1f ms | %.0f%% | %.1f ms | %.1f ms |\n", tb * 1e3, tu * 1e3,
                  to * 1e3, tc * 1e3, tc > 0 ? 100.0 * std::clamp((tb + tc - to) / tc, 0.0, 1.0) : 0.0,
                  median(finished) * 1e3, median(stepped) * 1e3);
    }
  } catch (const WickError& e) {
    std::fprintf(stderr, "overlap_bench: %s\n", e.what());
    comm::exit_after_failure(4);
  }
  return 0;
}
