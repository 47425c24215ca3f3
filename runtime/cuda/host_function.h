// Queues a host function on a CUDA stream (cudaLaunchHostFunc), with no CUDA headers.
//
//   static void pause(void* seconds) { std::this_thread::sleep_for(...); }
//   cuda::launch_host_function(0, current_stream(Device::cuda(0)).handle, pause, &seconds);
//
// fn(arg) runs on a CUDA thread once the work queued before it on `stream` has completed, and the
// stream's later work waits until it returns; fn must not call CUDA. Tests use it to hold a stream
// back for a known time (the NCCL watchdog test). A build without CUDA throws "built without CUDA".
#pragma once

namespace wick::cuda {

void launch_host_function(int device, void* stream, void (*fn)(void*), void* arg);

}  // namespace wick::cuda
