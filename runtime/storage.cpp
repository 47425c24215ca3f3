#include "runtime/storage.h"

#include "runtime/memory.h"

namespace wick {

std::shared_ptr<Storage> Storage::allocate(Device device, size_t bytes) {
  std::shared_ptr<Storage> storage(new Storage());
  storage->device_ = device;
  storage->stream_ = current_stream(device);
  storage->bytes_ = bytes;
  storage->data_ = allocate_bytes(device, bytes, storage->stream_);
  return storage;
}

std::shared_ptr<Storage> Storage::wrap(void* data, size_t bytes, Device device, std::shared_ptr<void> owner) {
  std::shared_ptr<Storage> storage(new Storage());
  storage->device_ = device;
  storage->bytes_ = bytes;
  storage->data_ = data;
  storage->owner_ = std::move(owner);
  storage->borrowed_ = true;
  return storage;
}

Storage::~Storage() {
  if (borrowed_) return;
  try {
    free_bytes(device_, data_, bytes_, stream_);
  } catch (...) {
    // Destructors never throw; a failing free at shutdown (driver gone) is not recoverable anyway.
  }
}

}  // namespace wick
