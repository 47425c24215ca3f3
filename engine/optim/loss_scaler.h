// Dynamic loss scaling for fp16 training (torch.cuda.amp.GradScaler's rule).
//
//   LossScaler scaler;                                       // scale 2^16
//   backward(loss, grads, GradientMode::Overwrite, scaler.loss_gradient(loss));  // d(scale·loss)
//   bool finite = scaler.unscale_and_check(grads);           // grads /= scale
//   if (finite) optimizer.step(grads, lr);                   // else the step is skipped
//   scaler.update(finite);                                   // halve on overflow, double after 2000 clean steps
//
// The scale is a power of two (with the default factors), so scaling and unscaling are exact
// unless a gradient leaves the f32 range. bf16 and f32 training do not need a scaler.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/autograd/backward.h"
#include "runtime/tensor.h"

namespace wick {

struct LossScalerConfig {
  double initial_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;  // clean steps in a row before the scale grows
};

class LossScaler {
 public:
  explicit LossScaler(LossScalerConfig config = {});

  double scale() const { return scale_; }
  // Steps skipped so far because a gradient was non-finite.
  int64_t n_skipped() const { return n_skipped_; }
  // Clean steps since the last growth or overflow.
  int64_t growth_tracker() const { return growth_tracker_; }

  // The root gradient for backward: `scale` in loss's shape, dtype and device, so backward
  // computes the gradients of scale·loss without changing the forward graph.
  Tensor loss_gradient(const Tensor& loss) const;
  // Divides every gradient in `grads` by the scale, in place, and returns false when any element
  // of any gradient is NaN or ±Inf (one host synchronization for all of them).
  bool unscale_and_check(autograd::GradientStore& grads) const;
  // After a step: non-finite -> count a skipped step, scale *= backoff_factor, reset the tracker;
  // finite -> tracker += 1, and at growth_interval scale *= growth_factor and reset the tracker.
  void update(bool finite);

  // "scale" (f64 0-d), "growth_tracker" and "n_skipped" (i64 0-d), CPU tensors.
  std::vector<std::pair<std::string, Tensor>> state_tensors() const;
  // Restores the state from exactly those names; throws naming a missing, extra or malformed one.
  void load_state(const std::vector<std::pair<std::string, Tensor>>& tensors);

 private:
  LossScalerConfig config_;
  double scale_;
  int64_t growth_tracker_ = 0;
  int64_t n_skipped_ = 0;
};

}  // namespace wick
