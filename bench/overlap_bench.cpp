// How much of the gradient all-reduce the buckets hide under backward, on a stack of transformer
// blocks (the DiT of models/dit, hidden 256, depth 8: 9.85M parameters, 39 MB of f32 gradients).
//
//   mpirun --oversubscribe -np 2 build/bench/overlap_bench [--steps 10] [--bucket-mb 4]
//
// Per step, each rank runs forward + backward with the buckets armed (all-reduces start during
// backward) and finish(); the same without arming (every all-reduce after backward); and
// backward alone (no communication). With T_b = backward alone, T_c = the all-reduces alone
// (unarmed time - T_b), T_o = the armed time: hidden fraction = (T_b + T_c - T_o) / T_c.
// Medians over the steps, the slowest rank's times; printed on rank 0.
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
  Tensor t = Tensor::from_vector<double>({seconds}, {1});
  group.all_reduce(t, comm::ReduceOp::Max);
  return t.to_vector<double>()[0];
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 10;
  int64_t bucket_mb = 4;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--bucket-mb")) bucket_mb = std::atoll(argv[i + 1]);
  }
  try {
    auto group = comm::make_process_group("auto", Device::cpu(), 600);
    const int rank = group->rank();
    set_init_seed(1);
    DiT model(DiTConfig{.in_channels = 4, .input_size = 16, .patch_size = 2, .hidden_size = 256, .depth = 8,
                        .num_heads = 4, .text_dim = 64, .pooled_dim = 64});
    auto optimizer = make_optimizer("adamw", model.trainable_parameters());
    GradientBuckets buckets(*optimizer, *group, bucket_mb << 20);
    const int64_t batch = 8;
    auto stream = [&](uint64_t purpose) { return derive_stream(7, static_cast<uint64_t>(rank), purpose, RngPurpose::Test); };
    Tensor x = randn({batch, 4, 16, 16}, stream(0)), target = randn({batch, 4, 16, 16}, stream(1));
    Tensor t = randn({batch}, stream(2)), context = randn({batch, 8, 64}, stream(3)), pooled = randn({batch, 64}, stream(4));
    Tensor mask = Tensor::from_vector<uint8_t>(std::vector<uint8_t>(batch * 8, 1), {batch, 8});

    // mode 0: backward alone; 1: unarmed (all-reduces after backward); 2: armed (overlapped).
    auto run = [&](int mode) {
      autograd::GradientStore store;
      group->barrier();
      auto start = Clock::now();
      Tensor loss = autograd::mse_loss(model.forward(x, t, context, mask, pooled), target);
      if (mode > 0) buckets.arm(mode == 2);
      autograd::backward(loss, store);
      if (mode > 0) buckets.finish(store);
      return std::chrono::duration<double>(Clock::now() - start).count();
    };
    run(0), run(1), run(2);  // warm-up
    std::vector<double> alone, after, overlapped;
    for (int s = 0; s < steps; ++s) {
      alone.push_back(slowest(*group, run(0)));
      after.push_back(slowest(*group, run(1)));
      overlapped.push_back(slowest(*group, run(2)));
    }
    double tb = median(alone), tu = median(after), to = median(overlapped), tc = std::max(0.0, tu - tb);
    if (rank == 0) {
      std::printf("overlap_bench: %s, %d ranks, DiT hidden 256 depth 8 (%lld parameters), batch %lld per rank, "
                  "%lld buckets of ~%lld MB, %d steps (medians, slowest rank)\n\n",
                  group->backend().c_str(), group->size(), static_cast<long long>(model.n_parameters()),
                  static_cast<long long>(batch), static_cast<long long>(buckets.n_buckets()),
                  static_cast<long long>(bucket_mb), steps);
      std::printf("| forward+backward alone | + all-reduce after | + buckets during backward | all-reduce alone | hidden |\n");
      std::printf("|---|---|---|---|---|\n");
      std::printf("| %.1f ms | %.1f ms | %.1f ms | %.1f ms | %.0f%% |\n", tb * 1e3, tu * 1e3, to * 1e3, tc * 1e3,
                  tc > 0 ? 100.0 * std::clamp((tb + tc - to) / tc, 0.0, 1.0) : 0.0);
    }
  } catch (const WickError& e) {
    std::fprintf(stderr, "overlap_bench: %s\n", e.what());
    comm::exit_after_failure(4);
  }
  return 0;
}
