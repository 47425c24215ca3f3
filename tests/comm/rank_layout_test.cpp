// comm/rank_layout.h: the GPU a rank takes, the places gathered over the group wick_comm_tests was
// started with (one machine: one node), and their description for layouts written as tables. The
// layout of ranks on two nodes is checked under mpirun by tests/train/two_nodes_test.sh.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "comm/launch_env.h"
#include "comm/rank_layout.h"
#include "runtime/error.h"
#include "tests/comm/test_group.h"

using namespace wick;

namespace {

TEST(RankLayout, GpuForLocalRank) {
  struct Case {
    int local_rank, n_gpus, gpu;
  };
  const std::vector<Case> cases = {{0, 1, 0}, {3, 1, 0}, {0, 8, 0}, {7, 8, 7}, {9, 8, 1}, {2, 4, 2}, {5, 4, 1}};
  for (const Case& c : cases)
    EXPECT_EQ(comm::gpu_for_local_rank(c.local_rank, c.n_gpus), c.gpu) << c.local_rank << " of " << c.n_gpus;
  EXPECT_THROW(comm::gpu_for_local_rank(0, 0), WickError);   // no GPU visible
  EXPECT_THROW(comm::gpu_for_local_rank(-1, 2), WickError);  // not a local rank
}

TEST(RankLayout, OneMachineIsOneNode) {
  EXPECT_EQ(g_group->node(), 0);
  EXPECT_EQ(g_group->n_nodes(), 1);
  const comm::LaunchEnv env = comm::detect_launch_env();
  if (env.launched) {
    EXPECT_EQ(g_group->local_rank(), env.local_rank) << "MPI's split against the launcher's variable";
  }
  EXPECT_EQ(g_group->local_size(), g_group->size());
}

TEST(RankLayout, GatheredPlaces) {
  const Device device = g_group->rank() % 2 ? Device::cuda(g_group->rank()) : Device::cpu();
  const std::vector<comm::RankPlace> places = comm::gather_rank_places(*g_group, device);
  ASSERT_EQ(static_cast<int>(places.size()), g_group->size());
  for (int r = 0; r < g_group->size(); ++r) {
    const comm::RankPlace& p = places[static_cast<size_t>(r)];
    EXPECT_EQ(p.rank, r);
    EXPECT_EQ(p.node, 0);
    EXPECT_EQ(p.local_rank, r);  // one machine: the local rank is the rank
    EXPECT_EQ(p.local_size, g_group->size());
    EXPECT_EQ(p.host, comm::host_name());
    EXPECT_EQ(p.device, r % 2 ? Device::cuda(r) : Device::cpu());
  }
}

TEST(RankLayout, Describe) {
  struct Case {
    std::vector<comm::RankPlace> places;
    std::string text;
  };
  auto place = [](int rank, int node, int local_rank, const char* host, Device device) {
    return comm::RankPlace{.rank = rank, .node = node, .local_rank = local_rank, .local_size = 2, .host = host,
                           .device = device};
  };
  const std::vector<Case> cases = {
      {{place(0, 0, 0, "a", Device::cuda(0)), place(1, 0, 1, "a", Device::cuda(1)), place(2, 1, 0, "b", Device::cuda(0)),
        place(3, 1, 1, "b", Device::cuda(1))},
       "node 0 (a): ranks 0-1, local ranks 0-1, cuda:0 cuda:1\nnode 1 (b): ranks 2-3, local ranks 0-1, cuda:0 cuda:1"},
      // round-robin placement (mpirun --map-by node), one host name for both nodes
      {{place(0, 0, 0, "h", Device::cpu()), place(1, 1, 0, "h", Device::cpu()), place(2, 0, 1, "h", Device::cpu()),
        place(3, 1, 1, "h", Device::cpu())},
       "node 0 (h): ranks 0 2, local ranks 0-1, cpu cpu\nnode 1 (h): ranks 1 3, local ranks 0-1, cpu cpu"},
      // one node known by two names
      {{place(0, 0, 0, "x", Device::cpu()), place(1, 0, 1, "x.cluster", Device::cpu())},
       "node 0 (x, x.cluster): ranks 0-1, local ranks 0-1, cpu cpu"},
  };
  for (const Case& c : cases) EXPECT_EQ(comm::describe_rank_places(c.places), c.text);
}

}  // namespace
