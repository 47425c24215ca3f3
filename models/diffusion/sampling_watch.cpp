#include "models/diffusion/sampling_watch.h"

#include <utility>

namespace wick::diffusion {
namespace {

thread_local const SamplingStepCallback* t_watch = nullptr;

}  // namespace

SamplingWatchScope::SamplingWatchScope(SamplingStepCallback callback)
    : callback_(std::move(callback)), previous_(t_watch) {
  t_watch = &callback_;
}

SamplingWatchScope::~SamplingWatchScope() { t_watch = previous_; }

void sampling_step_done(int64_t step, int64_t steps) {
  if (t_watch && *t_watch) (*t_watch)(step, steps);
}

}  // namespace wick::diffusion
