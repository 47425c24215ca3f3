#include "runtime/cpu/host_cache.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/error.h"

namespace wick::cpu {
namespace {

// Under AddressSanitizer (WICK_SANITIZE) every allocation is a block of exactly the bytes asked for, freed at once:
// rounding sizes up to a bucket and handing freed blocks out again would hide overruns and uses after free.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool exact_blocks = true;
#else
constexpr bool exact_blocks = false;
#endif

constexpr size_t min_cached_bytes = size_t(256) << 10;
constexpr size_t alignment = 64;

size_t default_limit_bytes() {
  if (const char* text = std::getenv("WICK_HOST_CACHE_MB")) return static_cast<size_t>(std::stoull(text)) << 20;
  long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  size_t physical = pages > 0 && page_size > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page_size) : 0;
  return std::min(physical / 4, size_t(8) << 30);
}

// Rounds up to the next of 8 evenly spaced steps between consecutive powers of two.
size_t bucket_size(size_t bytes) {
  if (bytes < min_cached_bytes) return (bytes + alignment - 1) / alignment * alignment;
  size_t power = size_t(1) << (63 - __builtin_clzll(bytes));
  size_t step = power / 8;
  return (bytes + step - 1) / step * step;
}

struct Cache {
  std::mutex mutex;
  std::map<size_t, std::vector<void*>> free_blocks;
  size_t cached_bytes = 0;
  size_t limit_bytes = default_limit_bytes();

  void release_locked() {
    for (auto& [size, blocks] : free_blocks)
      for (void* block : blocks) std::free(block);
    free_blocks.clear();
    cached_bytes = 0;
  }
};

Cache& cache() {
  static Cache* instance = new Cache();  // never destroyed: tensors may be freed during static teardown
  return *instance;
}

}  // namespace

void* host_cache_allocate(size_t bytes) {
  if constexpr (exact_blocks) {
    void* block = nullptr;
    WICK_CHECK_KIND(Runtime, posix_memalign(&block, alignment, std::max<size_t>(bytes, 1)) == 0,
                    "out of host memory allocating ", bytes, " bytes");
    return block;
  }
  size_t size = bucket_size(std::max<size_t>(bytes, 1));
  Cache& c = cache();
  if (size >= min_cached_bytes) {
    std::lock_guard<std::mutex> lock(c.mutex);
    auto found = c.free_blocks.find(size);
    if (found != c.free_blocks.end() && !found->second.empty()) {
      void* block = found->second.back();
      found->second.pop_back();
      c.cached_bytes -= size;
      return block;
    }
  }
  void* block = std::aligned_alloc(alignment, size);
  if (!block) {
    // Out of memory: give the cache back to the system and try once more.
    host_cache_release();
    block = std::aligned_alloc(alignment, size);
  }
  WICK_CHECK_KIND(Runtime, block != nullptr, "out of host memory allocating ", bytes, " bytes");
  return block;
}

void host_cache_free(void* data, size_t bytes) {
  if (!data) return;
  if constexpr (exact_blocks) {
    std::free(data);
    return;
  }
  size_t size = bucket_size(std::max<size_t>(bytes, 1));
  Cache& c = cache();
  if (size >= min_cached_bytes) {
    std::lock_guard<std::mutex> lock(c.mutex);
    if (c.cached_bytes + size <= c.limit_bytes) {
      c.free_blocks[size].push_back(data);
      c.cached_bytes += size;
      return;
    }
  }
  std::free(data);
}

void host_cache_release() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.release_locked();
}

int64_t host_cache_bytes() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return static_cast<int64_t>(c.cached_bytes);
}

}  // namespace wick::cpu
