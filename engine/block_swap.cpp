#include "engine/block_swap.h"

#include <algorithm>

#include "engine/autograd/checkpoint.h"
#include "engine/autograd/node.h"
#include "runtime/memory.h"

namespace wick {
namespace {

// A contiguous host copy of `t` in page-locked memory (plain aligned memory without a GPU driver).
Tensor pinned_copy(const Tensor& t) {
  Tensor source = t.to(Device::cpu()).contiguous();
  auto buffer = std::make_shared<PinnedBuffer>(std::max<size_t>(source.nbytes(), 1));
  std::shared_ptr<Storage> storage = Storage::wrap(buffer->data(), buffer->bytes(), Device::cpu(), buffer);
  Tensor host = Tensor::from_storage(storage, source.shape(), contiguous_strides(source.shape()), 0, source.dtype());
  if (source.nbytes() > 0) copy_bytes(host.data(), Device::cpu(), source.data(), Device::cpu(), source.nbytes(), {});
  return host;
}

}  // namespace

BlockSwapper::BlockSwapper(Device device) : device_(device) {
  if (device.is_cuda()) copy_stream_ = create_stream(device);
}

BlockSwapper::~BlockSwapper() {
  // Copies in flight write into memory the allocator may hand out again: let them finish.
  if (prefetched_) prefetched_->ready.synchronize();
  prefetched_.reset();
  if (device_.is_cuda()) {
    try {
      synchronize(copy_stream_);
    } catch (...) {
    }
    destroy_stream(copy_stream_);
  }
}

int BlockSwapper::add_block(const std::string& name, Module& block) {
  Block b{.name = name, .slots = {}, .bytes = 0};
  for (auto& [param_name, slot] : parameter_slots(block)) {
    if (!slot->defined()) continue;
    if (autograd::requires_grad(*slot)) {
      if (slot->device() != device_) {
        *slot = autograd::detach(*slot).to(device_);
        autograd::set_requires_grad(*slot, true, name + "." + param_name);
      }
      continue;
    }
    WICK_CHECK(!manages(slot), "BlockSwapper: ", name, ".", param_name, " is managed by another block already");
    Tensor host = device_.is_cuda() ? pinned_copy(*slot) : autograd::detach(*slot);
    *slot = host;
    b.bytes += static_cast<int64_t>(host.nbytes());
    b.slots.push_back({slot, host});
  }
  blocks_.push_back(std::move(b));
  return n_blocks() - 1;
}

bool BlockSwapper::manages(const Tensor* slot) const {
  for (const Block& b : blocks_)
    for (const SlotEntry& e : b.slots)
      if (e.slot == slot) return true;
  return false;
}

void BlockSwapper::begin_forward(bool backward_follows) { backward_follows_ = backward_follows; }

BlockSwapper::Copy BlockSwapper::copy_block(int k) {
  const Block& b = blocks_.at(static_cast<size_t>(k));
  Copy copy{.block = k, .tensors = {}, .ready = Event(device_)};
  if (device_.is_cpu()) {
    for (const SlotEntry& e : b.slots) copy.tensors.push_back(e.host.clone());
  } else {
    const Stream compute = current_stream(device_);
    // Allocated on the compute stream (its pool may hand back memory that compute work queued so far
    // still reads): the copy stream starts after that work.
    for (const SlotEntry& e : b.slots) copy.tensors.push_back(Tensor::empty(e.host.shape(), e.host.dtype(), device_));
    Event allocated(device_);
    allocated.record(compute);
    allocated.wait(copy_stream_);
    for (size_t i = 0; i < b.slots.size(); ++i) {
      const Tensor& host = b.slots[i].host;
      if (host.nbytes() > 0)
        copy_bytes(copy.tensors[i].data(), device_, host.data(), Device::cpu(), host.nbytes(), copy_stream_);
    }
    copy.ready.record(copy_stream_);
  }
  for (const Tensor& t : copy.tensors) live_.emplace_back(t.storage(), static_cast<int64_t>(t.nbytes()));
  stats_.bytes_copied += b.bytes;
  ++stats_.n_block_copies;
  stats_.peak_resident_bytes = std::max(stats_.peak_resident_bytes, resident_now());
  return copy;
}

void BlockSwapper::drop_prefetch() {
  if (!prefetched_) return;
  // Its memory goes back to the compute stream's pool: order that after the copy into it.
  prefetched_->ready.wait(current_stream(device_));
  prefetched_.reset();
}

void BlockSwapper::prefetch(int k) {
  if (prefetched_ && prefetched_->block == k) return;
  drop_prefetch();
  prefetched_ = copy_block(k);
}

BlockSwapper::Copy BlockSwapper::take(int k) {
  if (prefetched_ && prefetched_->block == k) {
    Copy copy = std::move(*prefetched_);
    prefetched_.reset();
    copy.ready.wait(current_stream(device_));
    ++stats_.n_prefetch_hits;
    return copy;
  }
  drop_prefetch();
  Copy copy = copy_block(k);
  copy.ready.wait(current_stream(device_));
  return copy;
}

void BlockSwapper::acquire(int k) {
  WICK_CHECK(k >= 0 && k < n_blocks(), "BlockSwapper: no block ", k, " (", n_blocks(), " blocks)");
  Copy copy = take(k);
  Block& b = blocks_[static_cast<size_t>(k)];
  for (size_t i = 0; i < b.slots.size(); ++i) *b.slots[i].slot = copy.tensors[i];
  const int next = autograd::recomputing() ? k - 1 : k + 1;
  if (next >= 0 && next < n_blocks()) prefetch(next);
}

void BlockSwapper::release(int k) {
  WICK_CHECK(k >= 0 && k < n_blocks(), "BlockSwapper: no block ", k, " (", n_blocks(), " blocks)");
  Block& b = blocks_[static_cast<size_t>(k)];
  for (SlotEntry& e : b.slots) *e.slot = e.host;
  // The forward leaves its last block: the recomputation in backward starts there. Backward leaves the
  // first block: the next step's forward starts there.
  const bool recomputing = autograd::recomputing();
  if (!recomputing && backward_follows_ && k == n_blocks() - 1) prefetch(k);
  if (recomputing && k == 0) prefetch(k);
}

int64_t BlockSwapper::resident_now() const {
  int64_t total = 0;
  live_.erase(std::remove_if(live_.begin(), live_.end(), [](const auto& entry) { return entry.first.expired(); }),
              live_.end());
  for (const auto& [storage, bytes] : live_) total += bytes;
  return total;
}

BlockSwapper::Stats BlockSwapper::stats() const {
  Stats s = stats_;
  s.resident_bytes = resident_now();
  return s;
}

void BlockSwapper::reset_peak() { stats_.peak_resident_bytes = resident_now(); }

std::vector<int> swap_indices(const BlockSwapper* swapper, const std::vector<std::string>& paths,
                              const std::string& model) {
  if (!swapper) return {};
  std::vector<int> index(paths.size(), -1);
  for (int k = 0; k < swapper->n_blocks(); ++k) {
    auto at = std::find(paths.begin(), paths.end(), swapper->block_name(k));
    WICK_CHECK(at != paths.end(), model, ": the swapper's block '", swapper->block_name(k), "' is not one of its blocks");
    index[static_cast<size_t>(at - paths.begin())] = k;
  }
  return index;
}

SwappedBlock::SwappedBlock(BlockSwapper* swapper, int k) : swapper_(k >= 0 ? swapper : nullptr), k_(k) {
  if (swapper_) swapper_->acquire(k_);
}

SwappedBlock::~SwappedBlock() {
  if (!swapper_) return;
  try {
    swapper_->release(k_);
  } catch (...) {
    // Destructors never throw; a failed prefetch shows again at the next acquire.
  }
}

}  // namespace wick
