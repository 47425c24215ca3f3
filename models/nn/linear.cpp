#include "models/nn/linear.h"

#include "engine/autograd/node.h"
#include "engine/autograd/ops_float8.h"
#include "engine/autograd/ops_matmul.h"
#include "engine/init.h"
#include "runtime/ops/creation.h"

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
  if (is_float8()) return autograd::float8_linear(x, weight_, weight_scale_, bias_);
  return autograd::linear(x, weight_, bias_);
}

void Linear::quantize_float8(Float8Scaling scaling) {
  if (is_float8()) return;
  WICK_CHECK(!autograd::requires_grad(weight_), "Linear: a trainable weight ", weight_.describe(),
             " cannot be stored as float8 (only a frozen base is; freeze it first)");
  Float8Weight q = wick::quantize_float8(weight_, scaling);
  weight_ = q.codes;
  register_parameter("weight_scale", &weight_scale_, q.scale, /*trainable=*/false);
}

void Linear::expect_float8(const Shape& scale_shape, Device device) {
  WICK_CHECK(numel(scale_shape) == 1 || numel(scale_shape) == out_features_, "Linear: a float8 scale of shape ",
             scale_shape, " fits neither one value nor the ", out_features_, " rows");
  WICK_CHECK(!autograd::requires_grad(weight_), "Linear: a trainable weight cannot be stored as float8");
  weight_ = Tensor::empty({out_features_, in_features_}, DType::U8, device);
  Tensor scale = ones(scale_shape, DType::F32, device);
  if (is_float8()) {
    weight_scale_ = scale;
    return;
  }
  register_parameter("weight_scale", &weight_scale_, scale, /*trainable=*/false);
}

Tensor Linear::dense_weight(DType dtype) const {
  if (is_float8()) return wick::dequantize_float8(weight_, weight_scale_, dtype);
  Tensor w = autograd::detach(weight_);
  return w.dtype() == dtype ? w : w.to(dtype);
}

}  // namespace wick::nn
