// A lost peer under mpirun: the last rank hangs (sleeps far past distributed.timeout_s) before an
// all-reduce; every other rank must get WickError(Training) naming the collective and the missing
// rank, print it, and end the job with status 4 (comm::exit_after_failure). Run by
// tests/comm/lost_rank_test.sh, which checks the status, the message and the time taken.
//
//   mpirun --oversubscribe -np 2 wick_comm_lost_rank_test [timeout_s]
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "comm/launch_env.h"
#include "runtime/error.h"
#include "runtime/tensor.h"

using namespace wick;

int main(int argc, char** argv) {
  double timeout_s = argc > 1 ? std::atof(argv[1]) : 3.0;
  auto group = comm::make_process_group("auto", Device::cpu(), timeout_s);
  if (group->size() < 2) {
    std::fprintf(stderr, "lost_rank_test: needs mpirun -np 2 or more\n");
    return 1;
  }
  Tensor x = Tensor::from_vector(std::vector<float>(1000, 1.0f), {1000});
  try {
    group->all_reduce(x);  // everyone alive: completes
    group->barrier();
    if (group->rank() == group->size() - 1) {
      std::fprintf(stderr, "lost_rank_test: rank %d hangs\n", group->rank());
      sleep(120);
      return 0;
    }
    group->all_reduce(x);
    std::fprintf(stderr, "lost_rank_test: rank %d: all_reduce completed without the hung rank\n", group->rank());
    return 1;
  } catch (const WickError& e) {
    std::fprintf(stderr, "wick: error: %s\n", e.what());
    comm::exit_after_failure(e.kind() == ErrorKind::Training ? 4 : 1);
  }
}
