// Feeds byte ranges to a callback on one helper thread, in the order they were pushed, while the
// caller goes on with other work (save_safetensors hashes a file this way while writing it).
//
//   Sha256 digest;
//   ByteObserverThread observer([&](const void* data, size_t n) { digest.update(data, n); });
//   observer.push(keep_alive, data, n, /*temporary_copy=*/false);   // returns at once
//   ... write the same bytes ...
//   observer.finish();   // every range observed; rethrows the callback's exception, if any
//
// The callback runs on the helper thread only, one range at a time. Each range's keep_alive holds
// its memory until the callback has seen it. Ranges marked temporary_copy (e.g. the host copy of a
// GPU tensor) count against max_copy_bytes: push() waits while more than that is queued, so the
// caller cannot run far ahead with copies; other ranges never make it wait.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace wick {

class ByteObserverThread {
 public:
  using Callback = std::function<void(const void* data, size_t bytes)>;

  explicit ByteObserverThread(Callback callback, uint64_t max_copy_bytes = uint64_t{256} << 20);
  // Stops the helper thread; ranges not yet observed are dropped (finish() was not reached because
  // the caller failed). Never throws.
  ~ByteObserverThread();
  ByteObserverThread(const ByteObserverThread&) = delete;
  ByteObserverThread& operator=(const ByteObserverThread&) = delete;

  // Queues [data, data + bytes). Throws the callback's exception if an earlier range failed.
  void push(std::shared_ptr<const void> keep_alive, const void* data, size_t bytes, bool temporary_copy);
  // Waits until every queued range was observed, then rethrows the callback's exception, if any.
  // Call once; push() after finish() is an error.
  void finish();

 private:
  struct Range {
    std::shared_ptr<const void> keep_alive;
    const void* data;
    size_t bytes;
    bool temporary_copy;
  };
  void run();

  Callback callback_;
  uint64_t max_copy_bytes_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Range> queue_;
  uint64_t queued_copy_bytes_ = 0;
  bool closing_ = false, abandon_ = false, finished_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace wick
