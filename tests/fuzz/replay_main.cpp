// Replays fuzz inputs through a target's LLVMFuzzerTestOneInput without libFuzzer (the gcc build's
// ctest entries fuzz.<name>): every file of each folder argument (sorted), or each file argument.
// Fails, naming the input, on an exception other than WickError, on a crash (the test dies), and on
// an allocation larger than WICK_FUZZ_MAX_ALLOC_MB (default 256) MiB, counted both as one operator new
// and as wick's CPU tensor memory peak (runtime/memory.h). Prints the inputs replayed.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <new>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "runtime/memory.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {
std::atomic<size_t> largest_new{0};

void note(size_t bytes) {
  size_t seen = largest_new.load(std::memory_order_relaxed);
  while (bytes > seen && !largest_new.compare_exchange_weak(seen, bytes)) {
  }
}
}  // namespace

// Every operator new of the process (libwick's included) comes here: the largest single request is noted.
void* operator new(size_t bytes) {
  note(bytes);
  if (void* p = std::malloc(bytes ? bytes : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t bytes) { return operator new(bytes); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  const char* limit_env = std::getenv("WICK_FUZZ_MAX_ALLOC_MB");
  const int64_t limit = (limit_env ? std::atoll(limit_env) : 256) << 20;
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    if (fs::is_directory(argv[i])) {
      for (const auto& entry : fs::directory_iterator(argv[i]))
        if (entry.is_regular_file()) inputs.push_back(entry.path());
    } else {
      inputs.emplace_back(argv[i]);
    }
  }
  std::sort(inputs.begin(), inputs.end());
  if (inputs.empty()) {
    std::fprintf(stderr, "no inputs (usage: %s CORPUS_DIR|FILE...)\n", argv[0]);
    return 1;
  }
  for (const fs::path& input : inputs) {
    std::ifstream file(input, std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    wick::reset_peak_memory(wick::Device::cpu());
    largest_new = 0;
    try {
      LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: uncaught exception: %s\n", input.c_str(), e.what());
      return 1;
    }
    const int64_t peak = wick::memory_stats(wick::Device::cpu()).peak_bytes;
    const int64_t largest = static_cast<int64_t>(largest_new.load());
    if (std::max(peak, largest) > limit) {
      std::fprintf(stderr, "%s (%zu bytes): allocated %lld bytes at once (tensor peak %lld), over the %lld limit\n",
                   input.c_str(), bytes.size(), static_cast<long long>(largest), static_cast<long long>(peak),
                   static_cast<long long>(limit));
      return 1;
    }
  }
  std::printf("%zu inputs replayed\n", inputs.size());
  return 0;
}
