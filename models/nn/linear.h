// Linear layer: y = x W^T + b, W [out, in], b [out] (torch.nn.Linear's layout and initialization).
//
//   auto fc = std::make_shared<nn::Linear>(784, 128);             // f32, trainable, with bias
//   Tensor y = fc->forward(x);                                    // x [..., 784] -> [..., 128]
//   auto frozen = std::make_shared<nn::Linear>(3072, 3072, nn::LinearOptions{.dtype = DType::BF16, .trainable = false});
#pragma once

#include "engine/module.h"

namespace wick::nn {

struct LinearOptions {
  bool bias = true;
  DType dtype = DType::F32;
  Device device = Device::cpu();
  bool trainable = true;
  // false: the parameters are allocated but not initialized (their values come from a weights file
  // loaded right after; saves the random initialization of billions of parameters).
  bool initialize = true;
};

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, LinearOptions options = {});
  std::string type_name() const override { return "Linear"; }
  Tensor forward(const Tensor& x) override;

  int64_t in_features() const { return in_features_; }
  int64_t out_features() const { return out_features_; }
  bool has_bias() const { return bias_.defined(); }

  Tensor weight_;  // [out, in]
  Tensor bias_;    // [out] or undefined

 private:
  int64_t in_features_, out_features_;
};

}  // namespace wick::nn
