#include "engine/autograd/grad_mode.h"

namespace wick::autograd {
namespace {
thread_local bool grad_enabled_ = true;
}

bool grad_enabled() { return grad_enabled_; }
void set_grad_enabled(bool enabled) { grad_enabled_ = enabled; }

}  // namespace wick::autograd
