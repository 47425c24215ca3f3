// `wick ranks [--gpus-per-node N] [--backend auto|mpi|nccl]`, under mpirun / srun: where each rank
// runs (node, host name, node-local rank, the GPU it takes) and one all-reduce across all of them,
// so that a launch on a new cluster can be checked before a training (docs/distributed.md
// "Several nodes"). Rank 0 prints; every rank checks the sum. Without a launcher it describes the
// one process.
//
// Exit status: 0 the sum is right on every rank; 2 bad options; 4 a wrong sum or a failed collective.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "comm/launch_env.h"
#include "comm/rank_layout.h"
#include "launch/commands.h"
#include "runtime/device.h"
#include "runtime/error.h"
#include "runtime/tensor.h"

namespace wick::launch {
namespace {

struct RanksArgs {
  int gpus_per_node = 0;
  std::string backend = "auto";
};

// The device a training rank would compute on: with --gpus-per-node N, the GPU it would take on
// nodes with N GPUs; else the visible GPU it takes (gpu_for_local_rank), or the CPU without one.
Device planned_device(const comm::ProcessGroup& group, int gpus_per_node) {
  if (group.device().is_cuda()) return group.device();
  if (gpus_per_node > 0) return Device::cuda(comm::gpu_for_local_rank(group.local_rank(), gpus_per_node));
  if (cuda_device_count() > 0) return Device::cuda(comm::gpu_for_local_rank(group.local_rank(), cuda_device_count()));
  return Device::cpu();
}

void run_ranks(const RanksArgs& args) {
  report_errors([&] {
    const comm::LaunchEnv launch = comm::detect_launch_env();
    // The collectives' device: NCCL needs the rank's GPU (make_process_group picks it); --gpus-per-node
    // plans for GPUs this machine may not have, so it checks the layout over MPI on host memory.
    const bool gpu = args.gpus_per_node == 0 && cuda_device_count() > 0 && args.backend != "mpi";
    auto group = comm::make_process_group(args.backend, gpu ? Device::cuda(0) : Device::cpu(), /*timeout_s=*/120);
    const Device device = planned_device(*group, args.gpus_per_node);
    if (launch.launched && launch.world_size == group->size() && launch.local_rank != group->local_rank())
      std::fprintf(stderr,
                   "wick ranks: warning: rank %d: the launcher's environment says local rank %d, MPI's shared-memory "
                   "split says %d; wick uses MPI's\n",
                   group->rank(), launch.local_rank, group->local_rank());
    const std::vector<comm::RankPlace> places = comm::gather_rank_places(*group, device);

    // All-reduce of rank + 1 over 256 Ki f32 per rank: every element must become size (size + 1) / 2.
    const int64_t n = 256 * 1024;
    Tensor values = Tensor::from_vector<float>(std::vector<float>(n, static_cast<float>(group->rank() + 1)), {n},
                                               group->device());
    const auto start = std::chrono::steady_clock::now();
    group->all_reduce(values);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::vector<float> sums = values.to_vector<float>();
    const float expected = static_cast<float>(group->size()) * static_cast<float>(group->size() + 1) / 2.0f;
    const int64_t wrong =
        std::count_if(sums.begin(), sums.end(), [&](float v) { return v != expected; });
    Tensor wrong_count = Tensor::from_vector<int64_t>({wrong}, {1}, group->device());
    group->all_reduce(wrong_count);
    const int64_t wrong_total = wrong_count.to_vector<int64_t>()[0];

    if (group->rank() == 0) {
      std::printf("wick ranks: %d rank%s on %d node%s, started by %s, backend %s\n", group->size(),
                  group->size() == 1 ? "" : "s", group->n_nodes(), group->n_nodes() == 1 ? "" : "s",
                  launch.launcher.c_str(), group->backend().c_str());
      for (const comm::RankPlace& p : places)
        std::printf("  rank %d: node %d (%s), local rank %d of %d, %s\n", p.rank, p.node, p.host.c_str(), p.local_rank,
                    p.local_size, p.device.str().c_str());
      std::printf("%s\n", comm::describe_rank_places(places).c_str());
      for (size_t a = 0; a < places.size(); ++a)
        for (size_t b = a + 1; b < places.size(); ++b)
          if (places[a].device.is_cuda() && places[a].node == places[b].node && places[a].device == places[b].device)
            std::printf("warning: ranks %d and %d share %s on node %d: NCCL needs one GPU per rank (start at most "
                        "as many ranks per node as it has GPUs)\n",
                        places[a].rank, places[b].rank, places[a].device.str().c_str(), places[a].node);
      std::printf("all-reduce of %lld f32 values over %d rank%s: %.1f ms, %s\n", static_cast<long long>(n),
                  group->size(), group->size() == 1 ? "" : "s", seconds * 1e3,
                  wrong_total == 0 ? "sums correct on every rank"
                                   : (std::to_string(wrong_total) + " wrong sums").c_str());
      std::fflush(stdout);
    }
    if (wrong_total != 0) WICK_FAIL(Training, "wick ranks: the all-reduce gave ", wrong_total, " wrong sums");
    group->barrier();
  });
}

}  // namespace

void add_ranks_command(CLI::App& app) {
  auto args = std::make_shared<RanksArgs>();
  CLI::App* cmd = app.add_subcommand(
      "ranks", "Under mpirun/srun: each rank's node, host, local rank and GPU, and an all-reduce across them "
               "(docs/distributed.md)");
  cmd->add_option("--gpus-per-node", args->gpus_per_node,
                  "show the GPU each rank would take on nodes with N GPUs (checks a launch layout where no GPU is "
                  "visible; the collectives then run over MPI)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--backend", args->backend, "the process group: auto (NCCL where a GPU is visible), mpi or nccl")
      ->check(CLI::IsMember({"auto", "mpi", "nccl"}));
  cmd->callback([args] { run_ranks(*args); });
}

}  // namespace wick::launch
