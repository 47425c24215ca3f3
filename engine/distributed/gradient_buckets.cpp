// GradientBuckets: leaf hooks fill the optimizer's flat gradient and launch one all-reduce (or, with
// a sharded optimizer, one reduce-scatter into the owned range) per bucket as soon as the bucket is
// complete; finish() fills the rest, waits and averages.
#include "engine/distributed/gradient_buckets.h"

#include <algorithm>

#include "engine/autograd/node.h"
#include "engine/checkpoint/optimizer_shards.h"
#include "runtime/error.h"
#include "runtime/ops/copy.h"
#include "runtime/ops/elementwise.h"

namespace wick {

GradientBuckets::GradientBuckets(Optimizer& optimizer, comm::ProcessGroup& group, int64_t bucket_bytes)
    : optimizer_(optimizer), group_(group) {
  WICK_CHECK(bucket_bytes > 0, "gradient buckets: bucket size must be > 0 bytes, got ", bucket_bytes);
  const std::vector<ParameterSlot>& slots = optimizer.parameters();
  WICK_CHECK(optimizer.flat_gradient().device() == group.device(), "gradient buckets: the parameters are on ",
             optimizer.flat_gradient().device().str(), " but the ", group.backend(), " group reduces on ",
             group.device().str(), "; use the nccl backend for CUDA parameters and mpi for CPU ones");
  // Buckets of whole parameters in flat order; a bucket closes once it holds bucket_bytes (f32).
  // Each covers [first slot's offset, next bucket's first offset) so the padding goes with it.
  int64_t limit = std::max<int64_t>(1, bucket_bytes / 4);
  bucket_of_slot_.resize(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    if (buckets_.empty() || buckets_.back().end - buckets_.back().begin >= limit) {
      Bucket bucket;
      bucket.begin = slots[i].offset;
      bucket.end = slots[i].offset;
      buckets_.push_back(bucket);
    }
    Bucket& bucket = buckets_.back();
    bucket.slots.push_back(i);
    bucket.end = i + 1 < slots.size() ? slots[i + 1].offset : optimizer.flat_numel();
    bucket_of_slot_[i] = buckets_.size() - 1;
  }
  // ZeRO-1: the ranks' ranges partition the flat buffer contiguously in rank order, so a bucket's
  // intersections with them are contiguous, in rank order, and partition the bucket: the counts of
  // a variable-count reduce-scatter (some may be zero).
  owned_end_ = optimizer.flat_numel();
  sharded_ = optimizer.sharded();
  if (sharded_) {
    std::vector<FlatRange> ranges = zero_partition(optimizer.flat_numel(), group.size());
    const FlatRange mine = ranges[static_cast<size_t>(group.rank())];
    auto [begin, end] = optimizer.owned_range();
    WICK_CHECK(begin == mine.begin && end == mine.end, "gradient buckets: the optimizer owns flat elements [", begin,
               ", ", end, ") but the ZeRO-1 partition gives ", group.describe(), " [", mine.begin, ", ", mine.end,
               "); shard it with shard_optimizer over the same group");
    owned_begin_ = begin;
    owned_end_ = end;
    for (Bucket& bucket : buckets_) {
      bucket.own_begin = std::clamp(begin, bucket.begin, bucket.end);
      for (const FlatRange& range : ranges) {
        const int64_t first = std::max(bucket.begin, range.begin), last = std::min(bucket.end, range.end);
        bucket.counts.push_back(std::max<int64_t>(0, last - first));
      }
    }
  }
  slot_ready_.assign(slots.size(), false);
  next_launch_ = n_buckets() - 1;
  for (size_t i = 0; i < slots.size(); ++i)
    autograd::set_leaf_hook(slots[i].parameter, [this, i](const Tensor&, const Tensor& grad) { on_ready(i, grad); });
}

GradientBuckets::~GradientBuckets() {
  try {
    wait_all();
  } catch (...) {
    // A failed collective was reported by finish(); nothing more to say while unwinding.
  }
  for (const ParameterSlot& slot : optimizer_.parameters()) autograd::set_leaf_hook(slot.parameter, nullptr);
}

std::pair<int64_t, int64_t> GradientBuckets::bucket_range(int64_t i) const {
  WICK_CHECK(i >= 0 && i < n_buckets(), "gradient buckets: no bucket ", i, " (", n_buckets(), " buckets)");
  return {buckets_[static_cast<size_t>(i)].begin, buckets_[static_cast<size_t>(i)].end};
}

void GradientBuckets::check_sharding() const {
  WICK_CHECK(optimizer_.sharded() == sharded_ || group_.size() == 1, "gradient buckets: the optimizer was ",
             sharded_ ? "unsharded" : "sharded", " after its buckets were made; call shard_optimizer before "
             "constructing GradientBuckets");
}

void GradientBuckets::arm(bool armed) {
  check_sharding();
  WICK_CHECK(std::none_of(buckets_.begin(), buckets_.end(), [](const Bucket& b) { return b.work != nullptr; }),
             "gradient buckets: arm() while a reduction is in flight; call finish() first");
  armed_ = armed;
  std::fill(slot_ready_.begin(), slot_ready_.end(), false);
  for (Bucket& bucket : buckets_) bucket.n_ready = 0;
  launched_during_backward_ = 0;
  next_launch_ = n_buckets() - 1;
}

void GradientBuckets::on_ready(size_t slot, const Tensor& grad) {
  if (!armed_ || slot_ready_[slot]) return;
  const ParameterSlot& target = optimizer_.parameters()[slot];
  WICK_CHECK(grad.shape() == target.parameter.shape(), "gradient buckets: the gradient of \"", target.name,
             "\" is ", grad.describe(), ", the parameter ", target.parameter.describe());
  copy_into(target.grad, grad);
  slot_ready_[slot] = true;
  Bucket& bucket = buckets_[bucket_of_slot_[slot]];
  ++bucket.n_ready;
  // Drive the collectives in flight: MPI progresses non-blocking collectives only inside MPI calls,
  // so each completed gradient is also a chance for the earlier buckets' collectives to advance.
  for (Bucket& other : buckets_)
    if (other.work) other.work->is_completed();
  // Launch in a fixed order, the last bucket first (backward completes the last layers first), so
  // every rank starts the same collectives in the same order whatever order its hooks fire in.
  while (next_launch_ >= 0) {
    Bucket& next = buckets_[static_cast<size_t>(next_launch_)];
    if (next.n_ready != static_cast<int64_t>(next.slots.size())) break;
    launch(next);
    if (!in_finish_) ++launched_during_backward_;
    --next_launch_;
  }
}

void GradientBuckets::launch(Bucket& bucket) {
  // Padding between parameters stays zero: the optimizer allocates it zeroed and only views of the
  // parameters are ever written. A group of one rank runs its collectives too (the single group's
  // complete at once; an NCCL group of one rank goes through its stream and events).
  const Tensor& flat = optimizer_.flat_gradient();
  Tensor range = flat.narrow(0, bucket.begin, bucket.end - bucket.begin);
  if (!sharded_) {
    bucket.work = group_.all_reduce_async(range);
    return;
  }
  // In place: this rank's segment of the bucket receives the sum of every rank's segment.
  const int64_t own = bucket.counts[static_cast<size_t>(group_.rank())];
  bucket.work = group_.reduce_scatter_v_async(range, flat.narrow(0, bucket.own_begin, own), bucket.counts);
}

void GradientBuckets::wait_all() {
  for (size_t i = 0; i < buckets_.size(); ++i) {
    Bucket& bucket = buckets_[i];
    if (!bucket.work) continue;
    std::shared_ptr<comm::Work> work = std::move(bucket.work);
    bucket.work = nullptr;
    try {
      work->wait();
    } catch (const WickError& e) {
      WICK_FAIL(Training, "gradient buckets: the ", sharded_ ? "reduce-scatter" : "all-reduce", " of bucket ", i,
                " of ", buckets_.size(), " (flat elements ", bucket.begin, "..", bucket.end, ") failed on ",
                group_.describe(), ": ", e.what());
    }
  }
}

BucketReport GradientBuckets::finish(const autograd::GradientStore& store) {
  check_sharding();
  BucketReport report;
  report.n_buckets = n_buckets();
  report.n_launched_during_backward = armed_ ? launched_during_backward_ : 0;
  bool was_armed = armed_;
  armed_ = true;
  in_finish_ = true;
  const std::vector<ParameterSlot>& slots = optimizer_.parameters();
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slot_ready_[i] && was_armed) continue;
    Tensor grad = store.get(slots[i].parameter);
    if (!grad.defined()) {
      ++report.n_missing;
      grad = Tensor::scalar(0.0, DType::F32, slots[i].grad.device()).expand(slots[i].parameter.shape());
    }
    slot_ready_[i] = false;  // so on_ready accepts it
    on_ready(i, grad);
  }
  in_finish_ = false;
  armed_ = false;
  std::fill(slot_ready_.begin(), slot_ready_.end(), false);
  for (Bucket& bucket : buckets_) bucket.n_ready = 0;
  launched_during_backward_ = 0;
  next_launch_ = n_buckets() - 1;
  wait_all();
  if (group_.size() > 1 && owned_end_ > owned_begin_) {
    Tensor mine = optimizer_.flat_gradient().narrow(0, owned_begin_, owned_end_ - owned_begin_);
    copy_into(mine, mul(mine, 1.0 / group_.size()));
  }
  return report;
}

}  // namespace wick
