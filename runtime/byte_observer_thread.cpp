// ByteObserverThread: an ordered queue of byte ranges drained by one helper thread.
#include "runtime/byte_observer_thread.h"

#include <utility>

#include "runtime/error.h"

namespace wick {

ByteObserverThread::ByteObserverThread(Callback callback, uint64_t max_copy_bytes)
    : callback_(std::move(callback)), max_copy_bytes_(max_copy_bytes) {
  WICK_CHECK(callback_ != nullptr, "ByteObserverThread: no callback");
  thread_ = std::thread([this] { run(); });
}

ByteObserverThread::~ByteObserverThread() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closing_ = true;
    abandon_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ByteObserverThread::push(std::shared_ptr<const void> keep_alive, const void* data, size_t bytes,
                              bool temporary_copy) {
  if (bytes == 0) return;
  std::unique_lock<std::mutex> lock(mutex_);
  WICK_CHECK(!closing_, "ByteObserverThread: push() after finish()");
  // A copy waits for room, unless nothing else is queued (a single range larger than the limit).
  if (temporary_copy)
    changed_.wait(lock, [&] {
      return error_ || queued_copy_bytes_ == 0 || queued_copy_bytes_ + bytes <= max_copy_bytes_;
    });
  if (error_) std::rethrow_exception(error_);
  queue_.push_back({std::move(keep_alive), data, bytes, temporary_copy});
  if (temporary_copy) queued_copy_bytes_ += bytes;
  lock.unlock();
  changed_.notify_all();
}

void ByteObserverThread::finish() {
  std::unique_lock<std::mutex> lock(mutex_);
  WICK_CHECK(!closing_, "ByteObserverThread: finish() called twice");
  closing_ = true;
  changed_.notify_all();
  changed_.wait(lock, [&] { return finished_; });
  if (error_) std::rethrow_exception(error_);
}

void ByteObserverThread::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    changed_.wait(lock, [&] { return !queue_.empty() || closing_; });
    if (abandon_ || error_ || queue_.empty()) break;  // abandoned, failed, or closing with nothing left
    Range range = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    std::exception_ptr error;
    try {
      callback_(range.data, range.bytes);
    } catch (...) {
      error = std::current_exception();
    }
    range.keep_alive.reset();
    lock.lock();
    if (range.temporary_copy) queued_copy_bytes_ -= range.bytes;
    if (error) error_ = error;
    changed_.notify_all();
  }
  queue_.clear();
  queued_copy_bytes_ = 0;
  finished_ = true;
  changed_.notify_all();
}

}  // namespace wick
