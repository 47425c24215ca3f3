// Parameter initialization from counter-based random streams, so a model built with the same seed
// has the same weights on any device and any number of ranks.
//
//   set_init_seed(42);                                  // once, before building the model
//   Tensor w = init_uniform({out, in}, -b, b);          // each call takes the next init stream
//   Tensor z = init_normal({n}, 0.0, 0.02);
//
// Stream k of seed s is derive_stream(s, k, 0, RngPurpose::Init): the k-th initializer call in
// construction order (thread-local counter, reset by set_init_seed).
#pragma once

#include <cstdint>

#include "runtime/tensor.h"

namespace wick {

void set_init_seed(uint64_t seed);
Tensor init_uniform(const Shape& shape, double low, double high, DType dtype = DType::F32,
                    Device device = Device::cpu());
Tensor init_normal(const Shape& shape, double mean, double std, DType dtype = DType::F32,
                   Device device = Device::cpu());
// PyTorch's default for Linear/Conv weights and biases: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
Tensor init_fan_in_uniform(const Shape& shape, int64_t fan_in, DType dtype = DType::F32,
                           Device device = Device::cpu());

}  // namespace wick
