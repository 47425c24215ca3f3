// MpiGroup: collectives over MPI on host memory (CPU training, and the bootstrap of NcclGroup).
//
//   comm::init_mpi();                                  // launch_env.h; make_process_group does this
//   comm::MpiGroup group(/*timeout_s=*/300);
//   auto work = group.all_reduce_async(grad);  ...  work->wait();
//
// - The group works on a duplicate of MPI_COMM_WORLD whose error handler is MPI_ERRORS_RETURN, so
//   MPI errors come back as WickError(Training) instead of aborting the job (as far as the MPI
//   library allows: Open MPI 4.1 still terminates the job when a peer process dies).
// - Every collective is a non-blocking MPI request (MPI_Iallreduce, MPI_Ireduce_scatter_block,
//   MPI_Ireduce_scatter, MPI_Iallgather, MPI_Ibcast, MPI_Ibarrier); Work::wait() polls it with
//   MPI_Test until it completes or the timeout passes. On a timeout the waiting rank asks every other rank, over a second
//   communicator, which collective it is in; ranks that do not answer within min(timeout, 10 s)
//   (at least 1 s) are named in the error as the ranks that did not arrive. After a timeout the
//   group is broken: every later call throws the same error.
// - bf16 and f16 sums and maxima are reduced through an f32 staging copy (one rounding at the end,
//   the same on every rank, and no custom MPI_Op); all_gather and broadcast move their raw 16 bits.
//   reduce_scatter_v in place (output = input's own segment; MPI forbids aliased buffers) receives
//   into a temporary of counts[rank] elements and copies it into place on completion.
// - Calls into MPI are serialized by a mutex, so MPI_THREAD_SERIALIZED is enough.
// - Element counts above 2^31 - 1 per call are refused (MPI counts are int).
#pragma once

#include <cstddef>
#include <memory>

#include "comm/process_group.h"

namespace wick::comm {

class MpiGroup : public ProcessGroup {
 public:
  // Needs MPI initialized (init_mpi()); throws WickError(Config) in a build without MPI. node_only: the
  // group of this rank's node only (MPI_Comm_split by node, ranks in world order): rank() and size() are
  // then within the node (distributed.shard_group: node).
  explicit MpiGroup(double timeout_s, bool node_only = false);
  ~MpiGroup() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  int node() const override { return node_; }
  int n_nodes() const override { return n_nodes_; }
  std::string backend() const override { return "mpi"; }
  Device device() const override { return Device::cpu(); }

  // Blocking broadcast of raw bytes from root (the NCCL unique id), with the group's timeout.
  void broadcast_bytes(void* data, size_t n_bytes, int root);

  struct State;

 protected:
  std::shared_ptr<Work> do_all_reduce(const Tensor& tensor, ReduceOp op) override;
  std::shared_ptr<Work> do_reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) override;
  std::shared_ptr<Work> do_reduce_scatter_v(const Tensor& input, const Tensor& output,
                                            const std::vector<int64_t>& counts, ReduceOp op) override;
  std::shared_ptr<Work> do_all_gather(const Tensor& input, const Tensor& output) override;
  std::shared_ptr<Work> do_broadcast(const Tensor& tensor, int root) override;
  std::shared_ptr<Work> do_barrier() override;

 private:
  std::shared_ptr<State> state_;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1, node_ = 0, n_nodes_ = 1;
};

}  // namespace wick::comm
