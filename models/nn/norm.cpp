#include "models/nn/norm.h"

#include "engine/autograd/ops_norm.h"
#include "runtime/ops/creation.h"

namespace wick::nn {

LayerNorm::LayerNorm(Shape normalized_shape, double eps, bool affine, DType dtype, Device device)
    : normalized_shape_(std::move(normalized_shape)), eps_(eps) {
  if (affine) {
    register_parameter("weight", &weight_, ones(normalized_shape_, dtype, device));
    register_parameter("bias", &bias_, zeros(normalized_shape_, dtype, device));
  }
}

Tensor LayerNorm::forward(const Tensor& x) { return autograd::layer_norm(x, normalized_shape_, weight_, bias_, eps_); }

RMSNorm::RMSNorm(int64_t dim, double eps, bool affine, DType dtype, Device device) : eps_(eps) {
  if (affine) register_parameter("weight", &weight_, ones({dim}, dtype, device));
}

Tensor RMSNorm::forward(const Tensor& x) { return autograd::rms_norm(x, weight_, eps_); }

GroupNorm::GroupNorm(int64_t n_groups, int64_t n_channels, double eps, bool affine, DType dtype, Device device)
    : n_groups_(n_groups), n_channels_(n_channels), eps_(eps) {
  WICK_CHECK(n_groups > 0 && n_channels % n_groups == 0, "GroupNorm: ", n_channels, " channels do not split into ",
             n_groups, " groups");
  if (affine) {
    register_parameter("weight", &weight_, ones({n_channels}, dtype, device));
    register_parameter("bias", &bias_, zeros({n_channels}, dtype, device));
  }
}

Tensor GroupNorm::forward(const Tensor& x) {
  WICK_CHECK(x.dim() >= 2 && x.size(1) == n_channels_, "GroupNorm: input ", x.describe(), " does not have ",
             n_channels_, " channels on axis 1");
  return autograd::group_norm(x, n_groups_, weight_, bias_, eps_);
}

}  // namespace wick::nn
