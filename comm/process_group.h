// ProcessGroup: the ranks of one training job and the collectives wick uses between them.
//
//   auto group = comm::make_process_group("auto", Device::cpu(), /*timeout_s=*/300);  // launch_env.h
//   group->all_reduce(grad);                                   // in place, sum over ranks
//   auto work = group->reduce_scatter_async(flat_grad, shard); // overlap with backward ...
//   work->wait();                                              // ... WickError(Training) after the timeout
//   group->reduce_scatter_v(bucket, bucket.narrow(0, 3, 5), {3, 5, 0, 2});  // rank 1 of 4, in place
//
// Implementations: SingleGroup (world size 1), MpiGroup (host memory), NcclGroup (device memory).
// Tensors: contiguous, on the group's device, dtype f32, f64, bf16, f16, i32 or i64. The group keeps
// the tensors of an async collective alive until its Work completes; the caller must not read or
// write them before wait() returns.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "runtime/tensor.h"

namespace wick::comm {

enum class ReduceOp { Sum, Max };
const char* reduce_op_name(ReduceOp op);

// The handle of an asynchronous collective. wait() blocks until it completes, or throws
// WickError(ErrorKind::Training) naming the collective, the elapsed time and (where known) the
// ranks that did not arrive once the group's timeout has passed (timeout_s < 0: the group's
// timeout; 0: no timeout). After a successful wait() the results are visible to the caller
// (on CUDA: to work queued on the current stream afterwards).
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait(double timeout_s = -1) = 0;
  // Non-blocking: true once the collective has completed (it never throws for a timeout).
  virtual bool is_completed() = 0;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Rank and number of ranks on this node (MPI_Comm_split_type shared memory).
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;
  // This rank's node, 0 .. n_nodes() - 1, the nodes numbered in the order of their lowest rank (MPI's
  // own view of which ranks share a node: the MPI_Comm_split_type groups).
  virtual int node() const = 0;
  virtual int n_nodes() const = 0;
  virtual std::string backend() const = 0;  // "single", "mpi", "nccl"
  // The device whose memory the collectives take: CPU for single/mpi, the CUDA device for nccl.
  virtual Device device() const = 0;
  // Seconds a collective may take before it is treated as a lost peer (0: never).
  double timeout_s() const { return timeout_s_; }
  void set_timeout_s(double seconds) { timeout_s_ = seconds; }

  // ---- asynchronous collectives (validated here, run by the backend) ----
  // In place: every rank ends with the reduction of all ranks' `tensor`.
  std::shared_ptr<Work> all_reduce_async(const Tensor& tensor, ReduceOp op = ReduceOp::Sum);
  // input: size()*n elements; output: n elements = the reduction of every rank's slice
  // [rank()*n, (rank()+1)*n) of input.
  std::shared_ptr<Work> reduce_scatter_async(const Tensor& input, const Tensor& output,
                                             ReduceOp op = ReduceOp::Sum);
  // Variable counts: counts has size() entries >= 0 (zeros allowed), the same on every rank; input
  // holds sum(counts) elements, segment r = [counts[0] + ... + counts[r-1], ... + counts[r]) in rank
  // order; output (counts[rank()] elements) receives the reduction over ranks of segment rank().
  // output is either disjoint from input or exactly its segment rank() (in place; no other overlap).
  std::shared_ptr<Work> reduce_scatter_v_async(const Tensor& input, const Tensor& output,
                                               const std::vector<int64_t>& counts, ReduceOp op = ReduceOp::Sum);
  // input: n elements; output: size()*n elements, rank r's input at [r*n, (r+1)*n).
  std::shared_ptr<Work> all_gather_async(const Tensor& input, const Tensor& output);
  // In place: every rank ends with root's `tensor`.
  std::shared_ptr<Work> broadcast_async(const Tensor& tensor, int root);
  std::shared_ptr<Work> barrier_async();

  // ---- blocking forms: the async call followed by wait() ----
  void all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::Sum) { all_reduce_async(tensor, op)->wait(); }
  void reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op = ReduceOp::Sum) {
    reduce_scatter_async(input, output, op)->wait();
  }
  void reduce_scatter_v(const Tensor& input, const Tensor& output, const std::vector<int64_t>& counts,
                        ReduceOp op = ReduceOp::Sum) {
    reduce_scatter_v_async(input, output, counts, op)->wait();
  }
  void all_gather(const Tensor& input, const Tensor& output) { all_gather_async(input, output)->wait(); }
  void broadcast(const Tensor& tensor, int root) { broadcast_async(tensor, root)->wait(); }
  void barrier() { barrier_async()->wait(); }

  // "rank 1 of 4 (mpi)" for messages.
  std::string describe() const;

 protected:
  explicit ProcessGroup(double timeout_s) : timeout_s_(timeout_s) {}
  // Arguments are validated; tensors are contiguous and on device().
  virtual std::shared_ptr<Work> do_all_reduce(const Tensor& tensor, ReduceOp op) = 0;
  virtual std::shared_ptr<Work> do_reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) = 0;
  // sum(counts) > 0; output may be input's segment rank() (see is_segment_of).
  virtual std::shared_ptr<Work> do_reduce_scatter_v(const Tensor& input, const Tensor& output,
                                                    const std::vector<int64_t>& counts, ReduceOp op) = 0;
  virtual std::shared_ptr<Work> do_all_gather(const Tensor& input, const Tensor& output) = 0;
  virtual std::shared_ptr<Work> do_broadcast(const Tensor& tensor, int root) = 0;
  virtual std::shared_ptr<Work> do_barrier() = 0;

 private:
  void check_tensor(const char* op, const char* role, const Tensor& tensor) const;
  double timeout_s_ = 0;
};

// A Work that is already complete (single-process group, empty tensors).
class CompletedWork : public Work {
 public:
  void wait(double) override {}
  bool is_completed() override { return true; }
};

// True when `part` is `whole`'s elements [offset, offset + part.numel()) in memory (both contiguous,
// one dtype): the in-place form of reduce_scatter_v.
bool is_segment_of(const Tensor& part, const Tensor& whole, int64_t offset);

// Seconds as "12.3 s" for messages.
std::string format_seconds(double seconds);

}  // namespace wick::comm
