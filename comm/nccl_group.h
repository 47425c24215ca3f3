// NcclGroup: collectives over NCCL on CUDA device memory.
//
//   auto mpi = std::make_shared<comm::MpiGroup>(timeout_s);   // bootstrap (after init_mpi())
//   comm::NcclGroup group(mpi, timeout_s);                    // GPU = node-local rank
//   auto work = group.all_reduce_async(grad);  ...  work->wait();
//
//   comm::NcclGroup one(Device::cuda(0), timeout_s);          // one rank, no MPI: the NCCL code
//                                                             // paths on a single GPU
//
// - Several ranks: rank 0 creates the ncclUniqueId and broadcasts it over MPI. One rank: the id is
//   created locally and MPI is not used (NCCL supports a communicator of one rank; its collectives
//   are local copies, but they run through the same streams, events and watchdog). The communicator
//   is created non-blocking (ncclCommInitRankConfig with config.blocking = 0) so no NCCL call can
//   hang the host.
// - Collectives run on a dedicated stream of the group: an event recorded on the caller's current
//   stream orders them after the work that produced the inputs; a second event marks completion.
//   wait() polls that event with the timeout and then makes the current stream wait on it.
// - A watchdog thread polls ncclCommGetAsyncError every 100 ms and checks the age of every
//   pending collective; on an asynchronous error, or a collective older than the timeout, it
//   calls ncclCommAbort. wait() (and every later call) then throws WickError(Training) naming the
//   collective and the elapsed time (NCCL cannot say which peer was lost).
// - reduce_scatter_v is one ncclReduce per non-empty segment (root = the segment's rank) between
//   ncclGroupStart and ncclGroupEnd; in place when output is input's own segment.
// - Tensors passed to an async collective are kept alive until it completes; they were allocated
//   on the caller's stream, which waits for the collective before any later reuse.
// In a build without CUDA or NCCL the constructors throw WickError(Config) saying what is missing
// (several ranks also need MPI, for the bootstrap: the MpiGroup cannot be made without it).
#pragma once

#include <memory>

#include "comm/mpi_group.h"
#include "comm/process_group.h"

namespace wick::comm {

class NcclGroup : public ProcessGroup {
 public:
  // The ranks of `bootstrap`; this rank's GPU is gpu_for_local_rank (rank_layout.h): its node-local
  // rank modulo the visible devices.
  NcclGroup(std::shared_ptr<MpiGroup> bootstrap, double timeout_s);
  // A group of one rank on `device` (a CUDA device), made without MPI.
  NcclGroup(Device device, double timeout_s);
  ~NcclGroup() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  int node() const override { return node_; }
  int n_nodes() const override { return n_nodes_; }
  std::string backend() const override { return "nccl"; }
  Device device() const override { return device_; }

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
  // Creates the communicator (ids from rank 0 over bootstrap_, or locally for one rank), the stream
  // and the watchdog.
  void start();

  std::shared_ptr<MpiGroup> bootstrap_;  // null for a group of one rank
  std::shared_ptr<State> state_;
  Device device_ = Device::cuda(0);
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1, node_ = 0, n_nodes_ = 1;
};

}  // namespace wick::comm
