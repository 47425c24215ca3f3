#include "runtime/device.h"

#include "runtime/error.h"

namespace wick {

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

Device parse_device(const std::string& text) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda" || text == "gpu") return Device::cuda(0);
  if (text.rfind("cuda:", 0) == 0) {
    const std::string digits = text.substr(5);
    bool ok = !digits.empty() && digits.find_first_not_of("0123456789") == std::string::npos;
    if (ok) return Device::cuda(std::stoi(digits));
  }
  WICK_FAIL(Config, "unknown device '", text, "': valid forms are cpu, cuda, cuda:N");
}

}  // namespace wick

#include "runtime/cuda/cuda_api.h"

namespace wick {
namespace {
constexpr int max_cuda_devices = 64;
thread_local void* current_streams[max_cuda_devices] = {};
}  // namespace

int cuda_device_count() { return cuda::device_count(); }
bool cuda_compiled() { return cuda::compiled(); }
CudaDeviceInfo cuda_device_info(int index) { return cuda::device_info(index); }

Stream current_stream(Device device) {
  if (device.is_cpu()) return {device, nullptr};
  WICK_CHECK(device.index >= 0 && device.index < max_cuda_devices, "bad CUDA device index ", device.index);
  return {device, current_streams[device.index]};
}

void set_current_stream(const Stream& stream) {
  if (stream.device.is_cpu()) return;
  WICK_CHECK(stream.device.index >= 0 && stream.device.index < max_cuda_devices, "bad CUDA device index ",
             stream.device.index);
  current_streams[stream.device.index] = stream.handle;
}

Stream create_stream(Device device) {
  if (device.is_cpu()) return {device, nullptr};
  return {device, cuda::create_stream(device.index)};
}

void destroy_stream(const Stream& stream) {
  if (stream.device.is_cuda()) cuda::destroy_stream(stream.device.index, stream.handle);
}

void synchronize(const Stream& stream) {
  if (stream.device.is_cuda()) cuda::synchronize_stream(stream.device.index, stream.handle);
}

void synchronize(Device device) {
  if (device.is_cuda()) cuda::synchronize_device(device.index);
}

Event::Event(Device device) : device_(device) {
  if (device.is_cuda()) handle_ = cuda::create_event(device.index);
}

Event::~Event() { release(); }

Event::Event(Event&& other) noexcept : device_(other.device_), handle_(other.handle_), recorded_(other.recorded_) {
  other.handle_ = nullptr;
  other.recorded_ = false;
}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    release();
    device_ = other.device_;
    handle_ = other.handle_;
    recorded_ = other.recorded_;
    other.handle_ = nullptr;
    other.recorded_ = false;
  }
  return *this;
}

void Event::release() {
  if (handle_) cuda::destroy_event(device_.index, handle_);
  handle_ = nullptr;
}

void Event::record(const Stream& stream) {
  if (!handle_) return;
  cuda::record_event(device_.index, handle_, stream.handle);
  recorded_ = true;
}

void Event::wait(const Stream& stream) const {
  if (handle_ && recorded_) cuda::stream_wait_event(device_.index, stream.handle, handle_);
}

void Event::synchronize() const {
  if (handle_ && recorded_) cuda::synchronize_event(device_.index, handle_);
}

}  // namespace wick
