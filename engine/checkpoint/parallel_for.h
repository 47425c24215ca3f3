// Runs independent jobs (hashing one file each) on several threads, for checkpoint I/O.
//
//   std::vector<FileDigest> digests(paths.size());
//   parallel_for(paths.size(), [&](size_t i) { digests[i] = ...hash paths[i]...; });
//
// work(i) runs once for each i in [0, n), on up to min(n, hardware_concurrency) threads including
// the calling one (fewer if the system refuses a thread); it must not throw (catch and record
// instead). Returns when every job is done.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <system_error>
#include <thread>
#include <vector>

namespace wick {

template <typename Work>
void parallel_for(size_t n, const Work& work) {
  const size_t n_threads = std::min<size_t>(n, std::max(1u, std::thread::hardware_concurrency()));
  std::atomic<size_t> next{0};
  auto drain = [&] {
    for (size_t i = next++; i < n; i = next++) work(i);
  };
  std::vector<std::thread> helpers;
  for (size_t t = 1; t < n_threads; ++t) {
    try {
      helpers.emplace_back(drain);
    } catch (const std::system_error&) {
      break;  // no more threads: the ones running (and this one) take the rest
    }
  }
  drain();
  for (std::thread& helper : helpers) helper.join();
}

}  // namespace wick
