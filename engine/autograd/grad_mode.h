// Whether differentiable ops record the graph on this thread.
//
//   { NoGradGuard no_grad; y = autograd::matmul(x, w); }   // y records nothing
//   if (grad_enabled()) ...
//
// Recording is on by default. Guards nest and restore the previous mode when they end.
#pragma once

namespace wick::autograd {

bool grad_enabled();
void set_grad_enabled(bool enabled);

class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled) : previous_(grad_enabled()) { set_grad_enabled(enabled); }
  ~GradModeGuard() { set_grad_enabled(previous_); }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool previous_;
};

class NoGradGuard : public GradModeGuard {
 public:
  NoGradGuard() : GradModeGuard(false) {}
};

}  // namespace wick::autograd
