// Devices and streams.
//
//   Device d = Device::cuda(0);          // or Device::cpu(), parse_device("cuda:1")
//   if (cuda_device_count() == 0) ...    // 0 when built without CUDA or no GPU is visible
//   Stream s = current_stream(d);        // ops launch on the current stream of their device
//   { StreamGuard guard(other); ... }    // temporarily make `other` current on this thread
//   Event ready(d);  ready.record(copy_stream);  ready.wait(compute_stream);   // cross-stream order
//
// A Stream is a plain handle (cudaStream_t on CUDA, nothing on the CPU); it does not own the stream.
#pragma once

#include <cstdint>
#include <string>

namespace wick {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static Device cpu() { return {DeviceType::CPU, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::CUDA, index}; }
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool operator==(const Device& other) const { return type == other.type && index == other.index; }
  bool operator!=(const Device& other) const { return !(*this == other); }
  std::string str() const;  // "cpu" or "cuda:N"
};

// "cpu", "cuda", "cuda:N"; throws listing the valid forms.
Device parse_device(const std::string& text);

// Number of visible CUDA devices; 0 when built without CUDA or when the driver finds none.
int cuda_device_count();
bool cuda_compiled();

struct CudaDeviceInfo {
  std::string name;
  int compute_major = 0, compute_minor = 0;
  int64_t total_bytes = 0, free_bytes = 0;
  int driver_version = 0, runtime_version = 0;
};
CudaDeviceInfo cuda_device_info(int index);

struct Stream {
  Device device;
  void* handle = nullptr;  // cudaStream_t; nullptr is the legacy default stream
};

Stream current_stream(Device device);
void set_current_stream(const Stream& stream);
// A new non-blocking stream on a CUDA device; the caller destroys it with destroy_stream.
Stream create_stream(Device device);
void destroy_stream(const Stream& stream);
// Waits for all work queued on the stream (no-op on the CPU).
void synchronize(const Stream& stream);
void synchronize(Device device);

// A CUDA event without timing (cudaEventDisableTiming); on the CPU every call is a no-op (CPU work
// is synchronous). Move-only; the destructor destroys the event (never throws).
class Event {
 public:
  Event() = default;
  explicit Event(Device device);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  // Marks the point in `stream` after everything queued on it so far.
  void record(const Stream& stream);
  // Makes `stream` wait (on the device) for the work before the last record; no-op if never recorded.
  void wait(const Stream& stream) const;
  // Blocks the host until the work before the last record is done.
  void synchronize() const;

 private:
  void release();
  Device device_;
  void* handle_ = nullptr;
  bool recorded_ = false;
};

class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream) : previous_(current_stream(stream.device)) {
    set_current_stream(stream);
  }
  ~StreamGuard() { set_current_stream(previous_); }
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream previous_;
};

}  // namespace wick
