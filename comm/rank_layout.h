// Where the ranks of a job run: each rank's node, host name, node-local rank and device.
//
//   Device gpu = Device::cuda(comm::gpu_for_local_rank(group->local_rank(), cuda_device_count()));
//   std::vector<comm::RankPlace> places = comm::gather_rank_places(*group, gpu);  // collective
//   if (group->rank() == 0) std::fprintf(stderr, "%s\n", comm::describe_rank_places(places).c_str());
//
// The node of a rank is MPI's view (ProcessGroup::node(): the ranks that share memory), not its host
// name: two nodes may report one name (containers, simulated nodes), and the GPU choice follows the
// node-local rank. See docs/distributed.md "Several nodes".
#pragma once

#include <string>
#include <vector>

#include "comm/process_group.h"
#include "runtime/device.h"

namespace wick::comm {

// The GPU a rank takes on its node: local_rank modulo the GPUs visible to it (n_visible_gpus >= 1).
// With one rank per GPU (--npernode = GPUs per node) that is GPU local_rank; where the launcher
// gives each rank one GPU (CUDA_VISIBLE_DEVICES per rank, srun --gpus-per-task=1) it is GPU 0.
int gpu_for_local_rank(int local_rank, int n_visible_gpus);

struct RankPlace {
  int rank = 0;
  int node = 0;  // ProcessGroup::node()
  int local_rank = 0;
  int local_size = 1;
  std::string host;  // gethostname(), at most 63 characters
  Device device;     // the device the rank computes on
};

// Collective over `group` (every rank calls it): every rank's place, in rank order. `device` is this
// rank's compute device (the group's device may differ: MPI on host memory for a CUDA run).
std::vector<RankPlace> gather_rank_places(ProcessGroup& group, Device device);

// One line per node: "node 1 (gpu-b07): ranks 2-3, local ranks 0-1, cuda:0 cuda:1".
std::string describe_rank_places(const std::vector<RankPlace>& places);

// This machine's host name (gethostname), "unknown" where it cannot be read.
std::string host_name();

}  // namespace wick::comm
