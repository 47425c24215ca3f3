#include "models/nn/linear.h"

#include "engine/autograd/ops_linalg.h"
#include "engine/init.h"

namespace wick::nn {

Linear::Linear(int64_t in_features, int64_t out_features, LinearOptions options)
    : in_features_(in_features), out_features_(out_features) {
  WICK_CHECK(in_features > 0 && out_features > 0, "Linear: features must be positive, got ", in_features, " -> ",
             out_features);
  auto make = [&](const Shape& shape) {
    return options.initialize ? init_fan_in_uniform(shape, in_features, options.dtype, options.device)
                              : Tensor::empty(shape, options.dtype, options.device);
  };
  register_parameter("weight", &weight_, make({out_features, in_features}), options.trainable);
  if (options.bias) register_parameter("bias", &bias_, make({out_features}), options.trainable);
}

Tensor Linear::forward(const Tensor& x) {
  WICK_CHECK(x.dim() >= 1 && x.size(-1) == in_features_, "Linear: input ", x.describe(), " does not end in ",
             in_features_, " features");
  return autograd::linear(x, weight_, bias_);
}

}  // namespace wick::nn
