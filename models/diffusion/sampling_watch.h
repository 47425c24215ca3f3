// Between a sampler's denoising steps: progress for whoever waits for the images, and a way to stop them. The
// samplers (sample_flow_euler, sample_euler_discrete, sample_ddim) report each finished step to the watch of the
// calling thread, if one is installed; its callback may print, or throw SamplingStopped to abandon the images
// (`wick train` does when a stop signal arrives during a sample grid, so the stop does not wait for the grid).
//
//   SamplingWatchScope watch([&](int64_t step, int64_t steps) {
//     if (PreemptionWatch::requested()) throw SamplingStopped();
//     show_progress(step, steps);
//   });
//   Tensor images = sampler.generate(model, prompts, settings);   // may throw SamplingStopped
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>

namespace wick::diffusion {

// Thrown by a watch to abandon the images being made (not an error: the caller catches it).
struct SamplingStopped : std::runtime_error {
  SamplingStopped() : std::runtime_error("sampling stopped on request") {}
};

using SamplingStepCallback = std::function<void(int64_t step, int64_t steps)>;

// Installs `callback` as this thread's watch for the scope's life (the previous one comes back after).
class SamplingWatchScope {
 public:
  explicit SamplingWatchScope(SamplingStepCallback callback);
  ~SamplingWatchScope();
  SamplingWatchScope(const SamplingWatchScope&) = delete;
  SamplingWatchScope& operator=(const SamplingWatchScope&) = delete;

 private:
  SamplingStepCallback callback_;
  const SamplingStepCallback* previous_;
};

// Called by the samplers after denoising step `step` (1-based) of `steps`: the current watch's callback, if any.
void sampling_step_done(int64_t step, int64_t steps);

}  // namespace wick::diffusion
