// A caching allocator for large host blocks. Fresh multi-megabyte allocations come from mmap and
// pay a page fault per 4 KiB page on first touch (a 64 MiB tensor: ~16k faults, several ms); a
// training step allocates the same sizes every step, so freed large blocks are kept by size and
// handed out again.
//
//   void* p = host_cache_allocate(bytes);   host_cache_free(p, bytes);   host_cache_release();
//
// Blocks of at least 256 KiB are rounded up to 1/8-power-of-two steps (at most 12.5% waste) and
// cached up to a limit (WICK_HOST_CACHE_MB, default a quarter of physical memory, at most 8 GiB;
// 0 turns caching off). Smaller blocks go straight to the system allocator. Thread-safe. An AddressSanitizer
// build (WICK_SANITIZE) neither rounds nor caches, so the sanitizer sees every overrun and use after free.
#pragma once

#include <cstddef>
#include <cstdint>

namespace wick::cpu {

void* host_cache_allocate(size_t bytes);
void host_cache_free(void* data, size_t bytes);
// Returns every cached block to the system.
void host_cache_release();
// Bytes held in the cache (freed by tensors, not yet returned to the system).
int64_t host_cache_bytes();

}  // namespace wick::cpu
