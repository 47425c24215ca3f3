#include "runtime/memory.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <sstream>
#include <string>
#include <utility>

#include "runtime/cpu/host_cache.h"
#include "runtime/cuda/cuda_api.h"
#include "runtime/error.h"

namespace wick {
namespace {

constexpr int max_devices = 1 + 64;  // CPU, then CUDA devices 0..63

struct Counters {
  std::atomic<int64_t> current{0};
  std::atomic<int64_t> peak{0};
  std::atomic<int64_t> n_allocations{0};
};

Counters& counters(Device device) {
  static Counters table[max_devices];
  int slot = device.is_cpu() ? 0 : 1 + device.index;
  WICK_CHECK(slot >= 0 && slot < max_devices, "memory: device index out of range: ", device.str());
  return table[slot];
}

}  // namespace

namespace detail {
void record_allocation(Device device, int64_t bytes) {
  Counters& c = counters(device);
  int64_t now = c.current.fetch_add(bytes) + bytes;
  int64_t peak = c.peak.load();
  while (now > peak && !c.peak.compare_exchange_weak(peak, now)) {
  }
  c.n_allocations.fetch_add(1);
}
void record_free(Device device, int64_t bytes) { counters(device).current.fetch_sub(bytes); }
}  // namespace detail

MemoryStats memory_stats(Device device) {
  Counters& c = counters(device);
  MemoryStats stats{c.current.load(), c.peak.load(), c.n_allocations.load(), 0};
  if (device.is_cpu()) stats.cached_bytes = cpu::host_cache_bytes();
  return stats;
}

void release_cached_memory(Device device) {
  if (device.is_cpu()) cpu::host_cache_release();
}

void reset_peak_memory(Device device) {
  Counters& c = counters(device);
  c.peak.store(c.current.load());
}

std::optional<int64_t> available_memory_bytes(Device device) {
  if (device.is_cuda()) {
    if (!cuda::compiled()) return std::nullopt;
    return cuda_device_info(device.index).free_bytes;
  }
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream fields(line.substr(13));
    int64_t kilobytes = -1;
    std::string unit;
    fields >> kilobytes >> unit;
    if (kilobytes < 0 || unit != "kB") return std::nullopt;
    return kilobytes * 1024;
  }
  return std::nullopt;
}

void* allocate_bytes(Device device, size_t bytes, const Stream& stream) {
  size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  void* data = nullptr;
  if (device.is_cpu()) {
    data = cpu::host_cache_allocate(bytes);
  } else {
    data = cuda::allocate(device.index, rounded, stream.handle);
  }
  detail::record_allocation(device, static_cast<int64_t>(bytes));
  return data;
}

void free_bytes(Device device, void* data, size_t bytes, const Stream& stream) {
  if (!data) return;
  if (device.is_cpu())
    cpu::host_cache_free(data, bytes);
  else
    cuda::free(device.index, data, stream.handle);
  detail::record_free(device, static_cast<int64_t>(bytes));
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
                const Stream& stream) {
  if (bytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, bytes);
    return;
  }
  cuda::copy(dst, dst_device.is_cuda(), src, src_device.is_cuda(), bytes, stream.handle);
}

PinnedBuffer::PinnedBuffer(size_t bytes) : bytes_(bytes) { data_ = cuda::allocate_pinned(bytes, &pinned_); }
PinnedBuffer::~PinnedBuffer() { release(); }
PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      pinned_(std::exchange(other.pinned_, false)) {}
PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    pinned_ = std::exchange(other.pinned_, false);
  }
  return *this;
}
void PinnedBuffer::release() {
  if (data_) cuda::free_pinned(data_, pinned_);
  data_ = nullptr;
  bytes_ = 0;
}

}  // namespace wick
