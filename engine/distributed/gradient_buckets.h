// Data-parallel gradient reduction overlapped with backward: the optimizer's flat gradient buffer is
// cut into buckets of whole parameters (about bucket_bytes each); each parameter's gradient is copied
// into its place the moment backward completes it (a leaf hook), and a bucket's collective starts as
// soon as its last parameter arrives, while backward goes on with the earlier layers. The collective
// is an all-reduce, or, when the optimizer's state is sharded (ZeRO-1, engine/distributed/zero.h), a
// reduce-scatter of the bucket with counts = its intersections with the ranks' ranges, in place into
// this rank's range: each rank then receives only the part of the mean its optimizer reads.
//
//   GradientBuckets buckets(*optimizer, *group, 25 << 20);
//   for (int micro = 0; micro < accumulation; ++micro) {
//     buckets.arm(micro == accumulation - 1);             // reduce only on the last micro-step
//     autograd::backward(loss(micro), store, micro == 0 ? Overwrite : Accumulate);
//   }
//   BucketReport r = buckets.finish(store);                // waits; flat gradient = mean over ranks
//                                                          // (sharded: its owned range only)
//   StepReport s = optimizer->step_reduced(lr, r.n_missing);
//
// Buckets are launched in one fixed order on every rank (the last bucket first), so ranks whose
// hooks fire in another order, or not at all (a skipped micro-step), still issue the same sequence
// of collectives: call finish() on every rank at every step, before any other collective.
// docs/distributed.md ("Gradient buckets") describes the rules. The group's device must be the
// parameters' device (MPI: CPU parameters; NCCL: CUDA parameters). Shard the optimizer before
// making its buckets.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "comm/process_group.h"
#include "engine/autograd/backward.h"
#include "engine/optim/optimizer.h"

namespace wick {

struct BucketReport {
  int64_t n_missing = 0;                 // parameters with no gradient (reduced as zeros)
  int64_t n_buckets = 0;
  int64_t n_launched_during_backward = 0;  // buckets whose collective started inside backward
};

class GradientBuckets {
 public:
  // Installs a leaf hook on every parameter of `optimizer` (replacing any other). bucket_bytes > 0.
  // A sharded optimizer must own its zero_partition range for this group (shard_optimizer does so).
  GradientBuckets(Optimizer& optimizer, comm::ProcessGroup& group, int64_t bucket_bytes);
  // Removes the hooks (waiting for collectives still in flight).
  ~GradientBuckets();
  GradientBuckets(const GradientBuckets&) = delete;
  GradientBuckets& operator=(const GradientBuckets&) = delete;

  // armed: the next backward pass reduces buckets as they fill (the last micro-step of an
  // accumulation); not armed: hooks do nothing (earlier micro-steps only accumulate).
  void arm(bool armed);
  // Completes the reduction: parameters whose hook did not fire take their gradient from `store`
  // (zeros when absent), the remaining buckets are launched, every collective is waited for, and
  // the flat gradient is divided by the world size. With a sharded optimizer only its owned range
  // is reduced and divided; the rest of the buffer keeps this rank's own (unreduced) gradient.
  // Disarms. Throws WickError(Training) after the group's timeout, naming the bucket.
  BucketReport finish(const autograd::GradientStore& store);

  int64_t n_buckets() const { return static_cast<int64_t>(buckets_.size()); }
  // The flat range [begin, end) of bucket i.
  std::pair<int64_t, int64_t> bucket_range(int64_t i) const;
  // True when the buckets reduce-scatter into the sharded optimizer's range (else all-reduce).
  bool reduce_scatters() const { return sharded_; }

 private:
  struct Bucket {
    int64_t begin = 0, end = 0;        // flat range (whole parameters, padding included)
    std::vector<size_t> slots;         // indices into the optimizer's parameters()
    std::vector<int64_t> counts;       // sharded: the bucket's intersection with each rank's range
    int64_t own_begin = 0;             // sharded: where this rank's intersection starts (flat)
    int64_t n_ready = 0;
    std::shared_ptr<comm::Work> work;  // set once launched
  };
  void on_ready(size_t slot, const Tensor& grad);
  void launch(Bucket& bucket);
  void wait_all();
  void check_sharding() const;

  Optimizer& optimizer_;
  comm::ProcessGroup& group_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_slot_;
  std::vector<bool> slot_ready_;
  bool sharded_ = false;               // the optimizer's state is sharded: reduce-scatter
  int64_t owned_begin_ = 0, owned_end_ = 0;  // the range finish() divides
  bool armed_ = false;
  bool in_finish_ = false;
  int64_t next_launch_ = -1;  // the bucket to launch next (launch order: last bucket first)
  int64_t launched_during_backward_ = 0;
};

}  // namespace wick
