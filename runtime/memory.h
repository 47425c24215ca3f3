// Device memory: allocation with byte accounting, and pinned host buffers.
//
//   void* p = allocate_bytes(Device::cuda(0), n, current_stream(Device::cuda(0)));
//   free_bytes(Device::cuda(0), p, n, stream);         // stream-ordered on CUDA
//   MemoryStats s = memory_stats(Device::cpu());       // current and peak bytes held by tensors
//   std::optional<int64_t> room = available_memory_bytes(Device::cuda(0));   // free now
//   PinnedBuffer staging(1 << 20);                     // page-locked host memory for async copies
//
// CPU memory is 64-byte aligned; large freed blocks are cached for reuse (runtime/cpu/host_cache.h). CUDA memory comes from the driver's stream-ordered pool
// (cudaMallocAsync) with an unlimited release threshold, so freed blocks are cached for reuse
// by later allocations on the same stream instead of returning to the driver.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "runtime/device.h"

namespace wick {

struct MemoryStats {
  int64_t current_bytes = 0;  // bytes held by live allocations now
  int64_t peak_bytes = 0;     // high-water mark since start or reset_peak_memory
  int64_t n_allocations = 0;  // allocations made since start
  int64_t cached_bytes = 0;   // freed host blocks kept for reuse (CPU; see runtime/cpu/host_cache.h)
};

MemoryStats memory_stats(Device device);
void reset_peak_memory(Device device);
// Returns cached free blocks to the system (CPU host cache; CUDA keeps its pool until exit).
void release_cached_memory(Device device);

// Memory the device has free now, beyond what this process's tensors hold: a GPU's free memory
// (cudaMemGetInfo), or the host's MemAvailable (/proc/meminfo). nullopt where it cannot be read
// (no /proc/meminfo; a CUDA device in a build without CUDA).
std::optional<int64_t> available_memory_bytes(Device device);

void* allocate_bytes(Device device, size_t bytes, const Stream& stream);
void free_bytes(Device device, void* data, size_t bytes, const Stream& stream);

// Copies bytes between any two devices (or within one) on `stream`; host<->device copies are
// synchronous unless the host side is pinned memory.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
                const Stream& stream);

// Page-locked host memory (plain aligned memory when built without CUDA). Move-only.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  bool pinned() const { return pinned_; }  // false where no GPU driver is present

 private:
  void release();
  void* data_ = nullptr;
  size_t bytes_ = 0;
  bool pinned_ = false;
};

namespace detail {
// Accounting hooks used by the allocators.
void record_allocation(Device device, int64_t bytes);
void record_free(Device device, int64_t bytes);
}  // namespace detail

}  // namespace wick
