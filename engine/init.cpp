#include "engine/init.h"

#include <cmath>

#include "runtime/ops/random.h"
#include "runtime/philox.h"

namespace wick {
namespace {

struct InitState {
  uint64_t seed = 0;
  uint64_t next = 0;
};
thread_local InitState init_state;

RngStream next_stream() {
  return derive_stream(init_state.seed, init_state.next++, 0, RngPurpose::Init);
}

}  // namespace

void set_init_seed(uint64_t seed) { init_state = {seed, 0}; }

Tensor init_uniform(const Shape& shape, double low, double high, DType dtype, Device device) {
  return uniform(shape, low, high, next_stream(), dtype, device);
}

Tensor init_normal(const Shape& shape, double mean, double std, DType dtype, Device device) {
  return normal(shape, mean, std, next_stream(), dtype, device);
}

Tensor init_fan_in_uniform(const Shape& shape, int64_t fan_in, DType dtype, Device device) {
  double bound = 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(fan_in, 1)));
  return init_uniform(shape, -bound, bound, dtype, device);
}

}  // namespace wick
