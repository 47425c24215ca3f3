// Normalization layers (torch.nn layouts and defaults): LayerNorm over trailing axes, RMSNorm over
// the last axis, GroupNorm over channel groups of [N, C, *]. Statistics in f32; affine parameters
// start at weight 1, bias 0.
//
//   auto norm = std::make_shared<nn::LayerNorm>(Shape{768});           // eps 1e-5, affine
//   auto rms = std::make_shared<nn::RMSNorm>(3072, 1e-6);
//   auto gn = std::make_shared<nn::GroupNorm>(/*groups=*/8, /*channels=*/32);
#pragma once

#include "engine/module.h"

namespace wick::nn {

class LayerNorm : public Module {
 public:
  LayerNorm(Shape normalized_shape, double eps = 1e-5, bool affine = true, DType dtype = DType::F32,
            Device device = Device::cpu());
  std::string type_name() const override { return "LayerNorm"; }
  Tensor forward(const Tensor& x) override;
  Tensor weight_, bias_;

 private:
  Shape normalized_shape_;
  double eps_;
};

class RMSNorm : public Module {
 public:
  explicit RMSNorm(int64_t dim, double eps = 1e-6, bool affine = true, DType dtype = DType::F32,
                   Device device = Device::cpu());
  std::string type_name() const override { return "RMSNorm"; }
  Tensor forward(const Tensor& x) override;
  Tensor weight_;

 private:
  double eps_;
};

class GroupNorm : public Module {
 public:
  GroupNorm(int64_t n_groups, int64_t n_channels, double eps = 1e-5, bool affine = true, DType dtype = DType::F32,
            Device device = Device::cpu());
  std::string type_name() const override { return "GroupNorm"; }
  Tensor forward(const Tensor& x) override;
  Tensor weight_, bias_;

 private:
  int64_t n_groups_, n_channels_;
  double eps_;
};

}  // namespace wick::nn
