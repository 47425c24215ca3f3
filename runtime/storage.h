// Storage: a ref-counted block of bytes on one device. Tensors are views onto a Storage.
//
//   auto s = Storage::allocate(Device::cpu(), 1024);                 // owned, accounted
//   auto m = Storage::wrap(ptr, n, Device::cpu(), mapping_keepalive);  // borrowed (e.g. mmap), no copy
//
// Owned memory is freed on the stream it was allocated on. Borrowed memory stays valid as long as
// `owner` is alive; the Storage holds a reference to it.
#pragma once

#include <cstddef>
#include <memory>

#include "runtime/device.h"

namespace wick {

class Storage {
 public:
  static std::shared_ptr<Storage> allocate(Device device, size_t bytes);
  static std::shared_ptr<Storage> wrap(void* data, size_t bytes, Device device, std::shared_ptr<void> owner);

  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  // False for borrowed memory (an mmap'd file): writing to it may be refused by the OS.
  bool owned() const { return !borrowed_; }

 private:
  Storage() = default;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
  Stream stream_;                 // where owned memory was allocated (and will be freed)
  std::shared_ptr<void> owner_;  // keeps borrowed memory alive (may be null)
  bool borrowed_ = false;
};

}  // namespace wick
