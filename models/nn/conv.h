// 2-d convolution layer (torch.nn.Conv2d layout and initialization): weight [O, C/groups, kh, kw],
// bias [O].
//
//   auto conv = std::make_shared<nn::Conv2d>(1, 32, 3, nn::Conv2dOptions{.padding = 1});
//   Tensor y = conv->forward(x);   // [N, 1, 28, 28] -> [N, 32, 28, 28]
#pragma once

#include <array>

#include "engine/module.h"

namespace wick::nn {

struct Conv2dOptions {
  int64_t stride = 1, padding = 0, dilation = 1, groups = 1;
  bool bias = true;
  DType dtype = DType::F32;
  Device device = Device::cpu();
  bool trainable = true;
  // false: the parameters are allocated but not initialized (their values come from a weights file
  // loaded right after), as LinearOptions::initialize.
  bool initialize = true;
};

class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv2dOptions options = {});
  std::string type_name() const override { return "Conv2d"; }
  Tensor forward(const Tensor& x) override;

  int64_t in_channels() const { return weight_.shape()[1] * options_.groups; }
  int64_t out_channels() const { return weight_.shape()[0]; }
  int64_t kernel_size() const { return weight_.shape()[2]; }
  const Conv2dOptions& options() const { return options_; }
  bool has_bias() const { return bias_.defined(); }

  Tensor weight_, bias_;

 private:
  Conv2dOptions options_;
};

}  // namespace wick::nn
