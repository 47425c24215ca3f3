#include "models/nn/lora.h"

#include <cmath>

#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/autograd/ops_dropout.h"
#include "engine/autograd/ops_elementwise.h"
#include "engine/autograd/ops_layout.h"
#include "engine/autograd/ops_matmul.h"
#include "engine/autograd/ops_reduce.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/matmul.h"
#include "runtime/ops/reduce.h"

namespace wick::nn {
namespace {

Tensor in_dtype(const Tensor& t, DType dtype) { return t.dtype() == dtype ? t : autograd::to_dtype(t, dtype); }

}  // namespace

LoRALinear::LoRALinear(std::shared_ptr<Linear> base, AdapterOptions options)
    : Adapter(options), base_(std::move(base)) {
  WICK_CHECK(base_ != nullptr, "LoRALinear: null base layer");
  WICK_CHECK(options_.rank > 0 && options_.rank <= std::min(base_->in_features(), base_->out_features()),
             "LoRALinear: rank ", options_.rank, " must be in [1, min(in, out)] for a ", base_->in_features(), " -> ",
             base_->out_features(), " layer");
  WICK_CHECK(options_.dropout >= 0.0 && options_.dropout < 1.0, "LoRALinear: dropout must be in [0, 1), got ",
             options_.dropout);
  Device device = base_->weight_.device();
  register_parameter_slot("weight", &base_->weight_);
  if (base_->has_bias()) register_parameter_slot("bias", &base_->bias_);
  if (base_->is_float8()) register_parameter_slot("weight_scale", &base_->weight_scale_);
  autograd::set_requires_grad(base_->weight_, false);
  if (base_->has_bias()) autograd::set_requires_grad(base_->bias_, false);
  down_ = register_module("lora_down", std::make_shared<Linear>(
                                           base_->in_features(), options_.rank,
                                           LinearOptions{.bias = false, .dtype = DType::F32, .device = device}));
  up_ = register_module("lora_up", std::make_shared<Linear>(options_.rank, base_->out_features(),
                                                            LinearOptions{.bias = false, .dtype = DType::F32, .device = device}));
  up_->weight_.copy_from(Tensor::scalar(0.0));
}

Tensor LoRALinear::delta_weight(DType dtype) const {
  Tensor product = autograd::matmul(up_->weight_, down_->weight_);  // [out, in]
  return in_dtype(autograd::mul(product, scale()), dtype);
}

Tensor LoRALinear::forward(const Tensor& x) {
  Tensor y = base_->forward(x);
  if (merged_) return y;
  Tensor h = x;
  if (options_.dropout > 0.0 && is_training()) h = autograd::dropout(x, options_.dropout, true);
  Tensor low = autograd::linear(h, in_dtype(down_->weight_, x.dtype()));
  Tensor update = autograd::linear(low, in_dtype(up_->weight_, x.dtype()));
  return autograd::add(y, autograd::mul(update, scale()));
}

namespace {

void check_mergeable(const Linear& base, const char* what) {
  WICK_CHECK(!base.is_float8(), what, ": the base weight is float8 (", base.weight_.describe(),
             "); merging would requantize it: merge into a bf16/f32 copy of the base instead");
}

}  // namespace

void LoRALinear::merge() {
  if (merged_) return;
  check_mergeable(*base_, "LoRALinear::merge");
  autograd::NoGradGuard no_grad;
  Tensor& w = base_->weight_;
  w.copy_from(wick::add(w.to(DType::F32), wick::mul(wick::matmul(up_->weight_, down_->weight_), scale())));
  merged_ = true;
}

void LoRALinear::unmerge() {
  if (!merged_) return;
  autograd::NoGradGuard no_grad;
  Tensor& w = base_->weight_;
  w.copy_from(wick::sub(w.to(DType::F32), wick::mul(wick::matmul(up_->weight_, down_->weight_), scale())));
  merged_ = false;
}

DoRALinear::DoRALinear(std::shared_ptr<Linear> base, AdapterOptions options) : LoRALinear(std::move(base), options) {
  WICK_CHECK(options.dropout == 0.0 || options.dora_axis == DoraAxis::Output,
             "DoRALinear: dropout is supported only with the output-axis magnitude (PEFT's); set network.dropout "
             "to 0 for the input-axis (kohya) DoRA");
  autograd::NoGradGuard no_grad;
  Tensor w = base_->dense_weight(DType::F32);
  if (options.dora_axis == DoraAxis::Input) {
    Tensor column_norm = wick::sqrt(wick::sum(wick::square(w), {0}, /*keepdim=*/true));  // [1, in]
    register_parameter("dora_scale", &dora_scale_, column_norm.contiguous().clone());
  } else {
    Tensor row_norm = wick::sqrt(wick::sum(wick::square(w), {1}, /*keepdim=*/false));  // [out]
    register_parameter("magnitude", &magnitude_, row_norm.contiguous().clone());
  }
}

Tensor DoRALinear::effective_weight(DType dtype) const {
  if (options_.dora_axis == DoraAxis::Input) {
    Tensor combined = autograd::add(base_->dense_weight(DType::F32), delta_weight(DType::F32));
    Tensor norm;
    {
      autograd::NoGradGuard no_grad;  // ||Wc|| is a constant in backward
      norm = wick::sqrt(wick::sum(wick::square(autograd::detach(combined)), {0}, true));
    }
    Tensor scaled = autograd::mul(combined, autograd::div(dora_scale_, norm));
    return in_dtype(scaled, dtype);
  }
  // Output axis: W' = (m / ||Wc||_row) ⊙ Wc; dW'/dm = Wc / ||Wc||_row, dW'/dWc = m / ||Wc||_row (norm constant).
  const DType work = dtype == DType::F64 ? DType::F64 : DType::F32;
  Tensor combined = autograd::add(base_->dense_weight(work), delta_weight(work));
  Tensor norm;
  {
    autograd::NoGradGuard no_grad;
    norm = wick::sqrt(wick::sum(wick::square(autograd::detach(combined)), {1}, true));  // [out, 1]
  }
  Tensor factor = autograd::div(autograd::unsqueeze(in_dtype(magnitude_, work), 1), norm);  // [out, 1]
  return in_dtype(autograd::mul(combined, factor), dtype);
}

Tensor DoRALinear::forward(const Tensor& x) {
  if (merged_) return base_->forward(x);
  if (options_.dora_axis == DoraAxis::Output && options_.dropout > 0.0 && is_training()) {
    // PEFT: base(x) + (m/n - 1) ⊙ (x_d W^T) + (m/n) ⊙ s·(x_d A^T B^T) = base(x) + x_d (W' - W)^T.
    const DType work = x.dtype() == DType::F64 ? DType::F64 : DType::F32;
    Tensor change = autograd::sub(effective_weight(work), base_->dense_weight(work));
    Tensor dropped = autograd::dropout(x, options_.dropout, true);
    return autograd::add(base_->forward(x), autograd::linear(dropped, in_dtype(change, x.dtype())));
  }
  return autograd::linear(x, effective_weight(x.dtype()), base_->bias_);
}

void DoRALinear::merge() {
  if (merged_) return;
  check_mergeable(*base_, "DoRALinear::merge");
  autograd::NoGradGuard no_grad;
  original_weight_ = base_->weight_.clone();
  base_->weight_.copy_from(effective_weight(DType::F32));
  merged_ = true;
}

void DoRALinear::unmerge() {
  if (!merged_) return;
  autograd::NoGradGuard no_grad;
  base_->weight_.copy_from(original_weight_);
  original_weight_ = Tensor();
  merged_ = false;
}

}  // namespace wick::nn
