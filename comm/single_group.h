// SingleGroup: the process group of a job with one rank (no launcher, or backend "none").
//
//   comm::SingleGroup group(Device::cpu());
//   group.all_reduce(t);                  // no-op: the sum over one rank
//   group.all_gather(shard, full);        // a copy
//   group.reduce_scatter_v(x, x, {n});    // in place: a no-op
//
// Collectives complete immediately; copies run on the device's current stream.
#pragma once

#include "comm/process_group.h"

namespace wick::comm {

class SingleGroup : public ProcessGroup {
 public:
  explicit SingleGroup(Device device = Device::cpu(), double timeout_s = 0)
      : ProcessGroup(timeout_s), device_(device) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_size() const override { return 1; }
  int node() const override { return 0; }
  int n_nodes() const override { return 1; }
  std::string backend() const override { return "single"; }
  Device device() const override { return device_; }

 protected:
  std::shared_ptr<Work> do_all_reduce(const Tensor& tensor, ReduceOp op) override;
  std::shared_ptr<Work> do_reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) override;
  std::shared_ptr<Work> do_reduce_scatter_v(const Tensor& input, const Tensor& output,
                                            const std::vector<int64_t>& counts, ReduceOp op) override;
  std::shared_ptr<Work> do_all_gather(const Tensor& input, const Tensor& output) override;
  std::shared_ptr<Work> do_broadcast(const Tensor& tensor, int root) override;
  std::shared_ptr<Work> do_barrier() override;

 private:
  Device device_;
};

}  // namespace wick::comm
