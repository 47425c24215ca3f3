// Block swapping: the frozen weights of some transformer blocks stay in host memory (page-locked on
// CUDA) and are streamed to the device just before each block runs, on a second stream, while the
// previous block computes (`train.blocks_to_swap`, docs/training.md "Memory").
//
//   auto swapper = std::make_shared<BlockSwapper>(Device::cuda(0));
//   int k = swapper->add_block("single_blocks.37", *block);  // its frozen tensors move to pinned host memory
//   swapper->begin_forward(/*backward_follows=*/true);
//   swapper->acquire(k);  y = block->run(x, ...);  swapper->release(k);   // inside the checkpointed function
//
// A block's frozen parameter slots (every slot that does not require a gradient: base weights,
// biases, norm scales, float8 codes and scales) point at the host copies between runs. acquire(k)
// points them at device copies, waiting for the prefetch of k when one is in flight (else copying
// now), and starts the prefetch of the block that runs next: k + 1 in forward, k - 1 while a
// checkpoint recomputes in backward (autograd::recomputing()). release(k) points the slots back at
// the host copies; the device copies live on while the recomputed graph of the block holds them,
// then return to the allocator. With gradient checkpointing, at most two blocks' copies are alive
// at a time (the block running and the one being prefetched): that is what swapping costs on the
// device. Results are bitwise those of the unswapped model: the copies are exact.
//
// On the CPU the same code runs with "device" copies that are host copies, tracked like device
// memory (stats()): the CPU build tests the GPU's code path. On CUDA, copies are allocated on the
// compute stream (the stream current when acquire runs), filled on the swapper's own stream after
// an event that orders them behind the compute work queued so far, and waited for by the compute
// stream before use.
//
// Sharded (`distributed.shard: weights`, ZeRO-3 for the frozen weights; docs/distributed.md): constructed
// with a process group of N ranks, the swapper keeps of each added block only this rank's 1/N of its
// frozen bytes, on the device. The block's frozen tensors are packed in slot order (each at a 256-byte
// boundary, the whole padded to a multiple of 4·N bytes) and rank r keeps bytes [r·S, (r+1)·S), S the
// packed size / N. acquire(k) all-gathers the packed block from every rank's shard into one device
// buffer whose views the slots then point at; the prefetch of the next block is that gather, started
// asynchronously, so it overlaps the current block's compute wherever the backend progresses it. Between
// runs a slot holds a placeholder of its shape and dtype (one element of all-ones bits, NaN in every
// floating dtype, broadcast), so the module keeps its shapes and parameter counts while no rank holds
// the whole block. add_block(..., /*shard_in_host_memory=*/true) keeps the rank's shard of that block in
// page-locked host memory instead (block swapping of the shards: host memory per rank is the swapped blocks / N);
// its gather first copies the shard to the device on the swapper's stream. Every rank must run the same sequence of acquire and release (the same forward and
// backward passes): the gathers are collectives. Give the swapper a group of its own (the gathers
// then never interleave with other collectives, e.g. gradient buckets in flight). Results are bitwise
// those of the unsharded model: the gathered bytes are the weights'.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "comm/process_group.h"
#include "engine/module.h"
#include "runtime/device.h"

namespace wick {

class BlockSwapper {
 public:
  // Host swapping; with `shard_group` (its device the swapper's), sharding across its ranks instead.
  explicit BlockSwapper(Device device, std::shared_ptr<comm::ProcessGroup> shard_group = nullptr);
  ~BlockSwapper();
  BlockSwapper(const BlockSwapper&) = delete;
  BlockSwapper& operator=(const BlockSwapper&) = delete;

  // Adds `block` as the next block in execution order and returns its index. Its frozen slots move to
  // host memory (pinned on CUDA; on the CPU they stay as they are, e.g. views of a mapped file), its
  // trainable ones to the device. The module must outlive the swapper's use.
  // Sharded only: shard_in_host_memory keeps this rank's shard of the block in host memory (see above).
  int add_block(const std::string& name, Module& block, bool shard_in_host_memory = false);
  int n_blocks() const { return static_cast<int>(blocks_.size()); }
  const std::string& block_name(int k) const { return blocks_.at(static_cast<size_t>(k)).name; }
  // Bytes of block k's frozen tensors (what one copy takes on the device; sharded: its packed size).
  int64_t block_bytes(int k) const { return blocks_.at(static_cast<size_t>(k)).bytes; }
  // Sharded: the bytes of block k this rank keeps (packed size / N); 0 for host swapping.
  int64_t shard_bytes(int k) const { return blocks_.at(static_cast<size_t>(k)).shard.nbytes(); }
  // Sharded: whether block k's shard is in host memory.
  bool shard_in_host_memory(int k) const { return blocks_.at(static_cast<size_t>(k)).host_shard; }
  bool sharded() const { return shard_group_ != nullptr; }
  int shard_ranks() const { return shard_group_ ? shard_group_->size() : 1; }
  // True for a slot some added block manages (its caller moves every other parameter to the device).
  bool manages(const Tensor* slot) const;
  Device device() const { return device_; }

  // Called by the model before its blocks run: whether a backward pass with checkpoint recomputation
  // follows this forward (then the last block is prefetched again as the forward leaves it, for the
  // recomputation that comes first).
  void begin_forward(bool backward_follows);
  void acquire(int k);
  void release(int k);

  struct Stats {
    int64_t resident_bytes = 0;       // device copies alive now
    int64_t peak_resident_bytes = 0;  // their high-water mark since construction or reset_peak
    int64_t bytes_copied = 0;         // host -> device bytes; sharded: bytes received from other ranks
    int64_t bytes_staged = 0;         // sharded: host shards copied to the device
    int64_t n_block_copies = 0;       // blocks copied in (sharded: gathered)
    int64_t n_prefetch_hits = 0;      // acquires that found their block prefetched
    double wait_s = 0;                // sharded: seconds acquire waited for gathers (the part not hidden)
  };
  Stats stats() const;
  void reset_peak();

 private:
  struct SlotEntry {
    Tensor* slot;
    Tensor host;
  };
  struct Block {
    std::string name;
    std::vector<SlotEntry> slots;  // sharded: `host` is the placeholder
    int64_t bytes = 0;
    // Sharded: each slot's byte offset in the packed block, and this rank's part of it (f32 words), on the
    // device or (host_shard) in host memory.
    std::vector<int64_t> offsets;
    Tensor shard;
    bool host_shard = false;
  };
  // Device copies of one block, ready once `ready` has passed.
  struct Copy {
    int block = -1;
    std::vector<Tensor> tensors;
    Event ready;
    std::shared_ptr<comm::Work> gather;  // sharded: the all-gather filling `tensors`
    Tensor staging;                      // sharded, host shard: its device copy, the gather's input
  };

  Copy copy_block(int k);
  Copy gather_block(int k);
  void add_sharded(Block& b, std::vector<std::pair<Tensor*, Tensor>> frozen, bool host_shard);
  // Waits for a copy's transfer on the compute stream (sharded: on the host, then the stream).
  void wait_for(Copy& copy, bool count_wait);
  // Starts copying block k unless it is prefetched already; drops another prefetched copy.
  void prefetch(int k);
  // Block k's copy: the prefetched one (waited for on the compute stream) or a new one.
  Copy take(int k);
  void drop_prefetch();
  int64_t resident_now() const;

  Device device_;
  std::shared_ptr<comm::ProcessGroup> shard_group_;
  Stream copy_stream_;
  std::vector<Block> blocks_;
  std::optional<Copy> prefetched_;
  bool backward_follows_ = false;
  // Every device copy made, for the resident bytes (a copy is alive while anything holds its storage).
  mutable std::vector<std::pair<std::weak_ptr<Storage>, int64_t>> live_;
  Stats stats_;
};

// For each of a model's blocks (`paths`, its DiffusionModel::block_paths in execution order), the
// swapper index of that block, or -1 (not swapped); empty for a null swapper. A swapper block that
// is none of `paths` is an error naming `model`.
std::vector<int> swap_indices(const BlockSwapper* swapper, const std::vector<std::string>& paths,
                              const std::string& model);

// acquire(k) for the scope's life, release(k) at its end; nothing for a null swapper or k < 0.
class SwappedBlock {
 public:
  SwappedBlock(BlockSwapper* swapper, int k);
  ~SwappedBlock();
  SwappedBlock(const SwappedBlock&) = delete;
  SwappedBlock& operator=(const SwappedBlock&) = delete;

 private:
  BlockSwapper* swapper_;
  int k_;
};

}  // namespace wick
