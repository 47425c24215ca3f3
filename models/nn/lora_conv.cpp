#include "models/nn/lora_conv.h"

#include <algorithm>

#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/autograd/ops_conv.h"
#include "engine/autograd/ops_dropout.h"
#include "engine/autograd/ops_elementwise.h"
#include "engine/autograd/ops_layout.h"
#include "engine/autograd/ops_matmul.h"
#include "runtime/ops/elementwise.h"

namespace wick::nn {
namespace {

Tensor in_dtype(const Tensor& t, DType dtype) { return t.dtype() == dtype ? t : autograd::to_dtype(t, dtype); }

}  // namespace

LoRAConv2d::LoRAConv2d(std::shared_ptr<Conv2d> base, AdapterOptions options)
    : Adapter(options), base_(std::move(base)) {
  WICK_CHECK(base_ != nullptr, "LoRAConv2d: null base layer");
  const Conv2dOptions& conv = base_->options();
  WICK_CHECK(conv.groups == 1, "LoRAConv2d: the base conv has groups = ", conv.groups,
             "; LoRA on grouped or depthwise convs is not supported (leave them out of network.target)");
  const int64_t in = base_->in_channels(), out = base_->out_channels(), k = base_->kernel_size();
  WICK_CHECK(options_.rank > 0 && options_.rank <= std::min(in * k * k, out), "LoRAConv2d: rank ", options_.rank,
             " must be in [1, min(in·kh·kw, out)] = [1, ", std::min(in * k * k, out), "] for a ", in, " -> ", out, ", ",
             k, "x", k, " conv");
  WICK_CHECK(options_.dropout >= 0.0 && options_.dropout < 1.0, "LoRAConv2d: dropout must be in [0, 1), got ",
             options_.dropout);
  Device device = base_->weight_.device();
  register_parameter_slot("weight", &base_->weight_);
  if (base_->has_bias()) register_parameter_slot("bias", &base_->bias_);
  autograd::set_requires_grad(base_->weight_, false);
  if (base_->has_bias()) autograd::set_requires_grad(base_->bias_, false);
  down_ = register_module("lora_down",
                          std::make_shared<Conv2d>(in, options_.rank, k,
                                                   Conv2dOptions{.stride = conv.stride, .padding = conv.padding,
                                                                 .dilation = conv.dilation, .bias = false,
                                                                 .dtype = DType::F32, .device = device}));
  up_ = register_module("lora_up", std::make_shared<Conv2d>(
                                       options_.rank, out, 1,
                                       Conv2dOptions{.bias = false, .dtype = DType::F32, .device = device}));
  up_->weight_.copy_from(Tensor::scalar(0.0));
}

Tensor LoRAConv2d::delta_weight(DType dtype) const {
  const Shape& w = base_->weight_.shape();
  const int64_t rank = options_.rank;
  Tensor up = autograd::reshape(up_->weight_, {w[0], rank});
  Tensor down = autograd::reshape(down_->weight_, {rank, w[1] * w[2] * w[3]});
  Tensor product = autograd::reshape(autograd::matmul(up, down), w);  // [out, in, kh, kw]
  return in_dtype(autograd::mul(product, scale()), dtype);
}

Tensor LoRAConv2d::forward(const Tensor& x) {
  Tensor y = base_->forward(x);
  if (merged_) return y;
  Tensor h = x;
  if (options_.dropout > 0.0 && is_training()) h = autograd::dropout(x, options_.dropout, true);
  const Conv2dOptions& conv = base_->options();
  Tensor low = autograd::conv2d(h, in_dtype(down_->weight_, x.dtype()), Tensor(), {conv.stride, conv.stride},
                                {conv.padding, conv.padding}, {conv.dilation, conv.dilation}, 1);
  Tensor update = autograd::conv2d(low, in_dtype(up_->weight_, x.dtype()), Tensor(), {1, 1}, {0, 0}, {1, 1}, 1);
  return autograd::add(y, autograd::mul(update, scale()));
}

void LoRAConv2d::merge() {
  if (merged_) return;
  autograd::NoGradGuard no_grad;
  Tensor& w = base_->weight_;
  w.copy_from(wick::add(w.to(DType::F32), delta_weight(DType::F32)));
  merged_ = true;
}

void LoRAConv2d::unmerge() {
  if (!merged_) return;
  autograd::NoGradGuard no_grad;
  Tensor& w = base_->weight_;
  w.copy_from(wick::sub(w.to(DType::F32), delta_weight(DType::F32)));
  merged_ = false;
}

}  // namespace wick::nn
