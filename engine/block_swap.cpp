#include "engine/block_swap.h"

#include <algorithm>
#include <chrono>

#include "engine/autograd/checkpoint.h"
#include "engine/autograd/node.h"
#include "runtime/error.h"
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

int64_t round_up(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

Stream stream_for(Device device) { return device.is_cuda() ? current_stream(device) : Stream{}; }

// A tensor of t's shape and dtype on `device` holding one element of all-ones bits (NaN in every floating
// dtype), broadcast: what a sharded slot holds between runs.
Tensor placeholder_of(const Tensor& t, Device device) {
  Tensor one = Tensor::empty({1}, t.dtype(), device);
  std::vector<unsigned char> ones(dtype_size(t.dtype()), 0xFF);
  copy_bytes(one.data(), device, ones.data(), Device::cpu(), ones.size(), stream_for(device));
  if (t.dim() == 0) return one.view({});
  return one.view(Shape(static_cast<size_t>(t.dim()), 1)).expand(t.shape());
}

}  // namespace

BlockSwapper::BlockSwapper(Device device, std::shared_ptr<comm::ProcessGroup> shard_group)
    : device_(device), shard_group_(std::move(shard_group)) {
  if (shard_group_)
    WICK_CHECK(shard_group_->device() == device, "BlockSwapper: the shard group's collectives take ",
               shard_group_->device().str(), " memory, the blocks run on ", device.str());
  if (device.is_cuda()) copy_stream_ = create_stream(device);
}

BlockSwapper::~BlockSwapper() {
  // Copies in flight write into memory the allocator may hand out again: let them finish.
  if (prefetched_) {
    try {
      if (prefetched_->gather) prefetched_->gather->wait();
    } catch (...) {
    }
    prefetched_->ready.synchronize();
  }
  prefetched_.reset();
  if (device_.is_cuda()) {
    try {
      synchronize(copy_stream_);
    } catch (...) {
    }
    destroy_stream(copy_stream_);
  }
}

int BlockSwapper::add_block(const std::string& name, Module& block, bool shard_in_host_memory) {
  WICK_CHECK(sharded() || !shard_in_host_memory, "BlockSwapper: ", name, ": a host shard without a shard group");
  Block b{.name = name, .slots = {}, .bytes = 0, .offsets = {}, .shard = Tensor(), .host_shard = false};
  std::vector<std::pair<Tensor*, Tensor>> frozen;
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
    if (sharded()) {
      frozen.emplace_back(slot, autograd::detach(*slot).contiguous());
      continue;
    }
    Tensor host = device_.is_cuda() ? pinned_copy(*slot) : autograd::detach(*slot);
    *slot = host;
    b.bytes += static_cast<int64_t>(host.nbytes());
    b.slots.push_back({slot, host});
  }
  if (sharded()) add_sharded(b, std::move(frozen), shard_in_host_memory);
  blocks_.push_back(std::move(b));
  return n_blocks() - 1;
}

void BlockSwapper::add_sharded(Block& b, std::vector<std::pair<Tensor*, Tensor>> frozen, bool host_shard) {
  const int64_t n = shard_group_->size(), rank = shard_group_->rank();
  int64_t end = 0;
  for (const auto& [slot, t] : frozen) {
    end = round_up(end, 256);
    b.offsets.push_back(end);
    end += static_cast<int64_t>(t.nbytes());
  }
  b.bytes = round_up(std::max<int64_t>(end, 1), 4 * n);
  const int64_t per_rank = b.bytes / n, first = rank * per_rank, last = first + per_rank;
  // This rank's bytes of the packed block, zero where the packing pads.
  std::vector<unsigned char> mine(static_cast<size_t>(per_rank), 0);
  for (size_t i = 0; i < frozen.size(); ++i) {
    const Tensor& t = frozen[i].second;
    const int64_t lo = std::max(first, b.offsets[i]), hi = std::min(last, b.offsets[i] + static_cast<int64_t>(t.nbytes()));
    if (lo < hi)
      copy_bytes(mine.data() + (lo - first), Device::cpu(), static_cast<const unsigned char*>(t.data()) + (lo - b.offsets[i]),
                 t.device(), static_cast<size_t>(hi - lo), stream_for(t.device()));
  }
  const Device home = host_shard ? Device::cpu() : device_;
  b.shard = Tensor::empty({per_rank / 4}, DType::F32, home);
  copy_bytes(b.shard.data(), home, mine.data(), Device::cpu(), mine.size(), stream_for(home));
  if (host_shard && device_.is_cuda()) b.shard = pinned_copy(b.shard);
  b.host_shard = host_shard;
  // The whole tensors go (the slots held the last references the swapper knows of).
  for (auto& [slot, t] : frozen) {
    Tensor placeholder = placeholder_of(t, device_);
    t = Tensor();
    *slot = placeholder;
    b.slots.push_back({slot, placeholder});
  }
}

bool BlockSwapper::manages(const Tensor* slot) const {
  for (const Block& b : blocks_)
    for (const SlotEntry& e : b.slots)
      if (e.slot == slot) return true;
  return false;
}

void BlockSwapper::begin_forward(bool backward_follows) { backward_follows_ = backward_follows; }

BlockSwapper::Copy BlockSwapper::gather_block(int k) {
  const Block& b = blocks_.at(static_cast<size_t>(k));
  Copy copy{.block = k, .tensors = {}, .ready = Event(device_), .gather = nullptr, .staging = Tensor()};
  // Allocated on the compute stream; the group orders its collective after the work queued there.
  Tensor packed = Tensor::empty({b.shard.numel() * shard_group_->size()}, DType::F32, device_);
  if (!b.host_shard) {
    copy.gather = shard_group_->all_gather_async(b.shard, packed);
  } else if (device_.is_cpu()) {
    // The GPU's path with a host clone standing in for the device copy (as host swapping does on the CPU).
    copy.staging = b.shard.clone();
    copy.gather = shard_group_->all_gather_async(copy.staging, packed);
  } else {
    // The shard's copy and the gather go on the swapper's stream, after the compute work queued so far
    // (the memory's previous users); the group orders its collective after the copy.
    copy.staging = Tensor::empty(b.shard.shape(), DType::F32, device_);
    Event allocated(device_);
    allocated.record(current_stream(device_));
    allocated.wait(copy_stream_);
    StreamGuard on_copy_stream(copy_stream_);
    copy_bytes(copy.staging.data(), device_, b.shard.data(), Device::cpu(), b.shard.nbytes(), copy_stream_);
    copy.gather = shard_group_->all_gather_async(copy.staging, packed);
  }
  if (copy.staging.defined()) {
    live_.emplace_back(copy.staging.storage(), static_cast<int64_t>(copy.staging.nbytes()));
    stats_.bytes_staged += static_cast<int64_t>(b.shard.nbytes());
  }
  for (size_t i = 0; i < b.slots.size(); ++i) {
    const Tensor& like = b.slots[i].host;
    copy.tensors.push_back(Tensor::from_storage(packed.storage(), like.shape(), contiguous_strides(like.shape()),
                                                b.offsets[i] / static_cast<int64_t>(dtype_size(like.dtype())),
                                                like.dtype()));
  }
  live_.emplace_back(packed.storage(), static_cast<int64_t>(packed.nbytes()));
  stats_.bytes_copied += b.bytes - static_cast<int64_t>(b.shard.nbytes());
  ++stats_.n_block_copies;
  stats_.peak_resident_bytes = std::max(stats_.peak_resident_bytes, resident_now());
  return copy;
}

void BlockSwapper::wait_for(Copy& copy, bool count_wait) {
  if (copy.gather) {
    const auto start = std::chrono::steady_clock::now();
    std::shared_ptr<comm::Work> gather = std::move(copy.gather);
    copy.gather = nullptr;
    try {
      gather->wait();
    } catch (const WickError& e) {
      const Block& b = blocks_.at(static_cast<size_t>(copy.block));
      WICK_FAIL(Training, "weight sharding: the all-gather of ", b.name, " (", b.bytes, " bytes) failed on ",
                shard_group_->describe(), ": ", e.what());
    }
    copy.staging = Tensor();  // the gather has read it
    if (count_wait) stats_.wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return;
  }
  copy.ready.wait(current_stream(device_));
}

BlockSwapper::Copy BlockSwapper::copy_block(int k) {
  if (sharded()) return gather_block(k);
  const Block& b = blocks_.at(static_cast<size_t>(k));
  Copy copy{.block = k, .tensors = {}, .ready = Event(device_), .gather = nullptr, .staging = Tensor()};
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
  wait_for(*prefetched_, /*count_wait=*/false);
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
    wait_for(copy, /*count_wait=*/true);
    ++stats_.n_prefetch_hits;
    return copy;
  }
  drop_prefetch();
  Copy copy = copy_block(k);
  wait_for(copy, /*count_wait=*/true);
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
  // first block: the next step's forward starts there (not when sharded: a gather left in flight past the
  // step would outlive the work every rank is sure to do next).
  const bool recomputing = autograd::recomputing();
  if (!recomputing && backward_follows_ && k == n_blocks() - 1) prefetch(k);
  if (recomputing && k == 0 && !sharded()) prefetch(k);
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
