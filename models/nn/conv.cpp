#include "models/nn/conv.h"

#include "engine/autograd/ops_conv.h"
#include "engine/init.h"

namespace wick::nn {

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv2dOptions options)
    : options_(options) {
  WICK_CHECK(options.groups > 0 && in_channels % options.groups == 0 && out_channels % options.groups == 0,
             "Conv2d: ", in_channels, " -> ", out_channels, " channels do not split into ", options.groups, " groups");
  int64_t fan_in = in_channels / options.groups * kernel_size * kernel_size;
  auto make = [&](const Shape& shape) {
    return options.initialize ? init_fan_in_uniform(shape, fan_in, options.dtype, options.device)
                              : Tensor::empty(shape, options.dtype, options.device);
  };
  register_parameter("weight", &weight_, make({out_channels, in_channels / options.groups, kernel_size, kernel_size}),
                     options.trainable);
  if (options.bias) register_parameter("bias", &bias_, make({out_channels}), options.trainable);
}

Tensor Conv2d::forward(const Tensor& x) {
  return autograd::conv2d(x, weight_, bias_, {options_.stride, options_.stride}, {options_.padding, options_.padding},
                          {options_.dilation, options_.dilation}, options_.groups);
}

}  // namespace wick::nn
