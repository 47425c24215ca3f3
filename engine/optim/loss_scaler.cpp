#include "engine/optim/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "runtime/ops/copy.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/reduce.h"

namespace wick {

LossScaler::LossScaler(LossScalerConfig config) : config_(config), scale_(config.initial_scale) {
  WICK_CHECK(std::isfinite(config.initial_scale) && config.initial_scale > 0.0,
             "LossScaler: initial_scale must be finite and > 0, got ", config.initial_scale);
  WICK_CHECK(config.growth_factor > 1.0, "LossScaler: growth_factor must be > 1, got ", config.growth_factor);
  WICK_CHECK(config.backoff_factor > 0.0 && config.backoff_factor < 1.0,
             "LossScaler: backoff_factor must lie in (0, 1), got ", config.backoff_factor);
  WICK_CHECK(config.growth_interval >= 1, "LossScaler: growth_interval must be >= 1, got ",
             config.growth_interval);
}

Tensor LossScaler::loss_gradient(const Tensor& loss) const {
  WICK_CHECK(loss.defined(), "LossScaler::loss_gradient: the loss is undefined");
  return full(loss.shape(), scale_, loss.dtype(), loss.device());
}

bool LossScaler::unscale_and_check(autograd::GradientStore& grads) const {
  // probe = sum(g · 0) over every gradient: 0 when all elements are finite, NaN otherwise (Inf·0
  // and NaN·0 are NaN), and it cannot overflow. Summed per device, one read-back per device.
  bool finite = true;
  Tensor pending;
  auto flush = [&] {
    if (pending.defined() && !std::isfinite(pending.item())) finite = false;
    pending = Tensor();
  };
  for (const auto& [id, entry] : grads.entries()) {
    const Tensor& grad = entry.grad;
    if (!grad.defined() || grad.numel() == 0) continue;
    copy_into(grad, div(grad, scale_));
    Tensor probe = sum(mul(grad, 0.0)).to(DType::F32);
    if (pending.defined() && pending.device() != probe.device()) flush();
    pending = pending.defined() ? add(pending, probe) : probe;
  }
  flush();
  return finite;
}

void LossScaler::update(bool finite) {
  if (!finite) {
    n_skipped_ += 1;
    scale_ *= config_.backoff_factor;
    growth_tracker_ = 0;
    return;
  }
  growth_tracker_ += 1;
  if (growth_tracker_ >= config_.growth_interval) {
    scale_ *= config_.growth_factor;
    growth_tracker_ = 0;
  }
}

std::vector<std::pair<std::string, Tensor>> LossScaler::state_tensors() const {
  return {{"scale", Tensor::scalar(scale_, DType::F64)},
          {"growth_tracker", Tensor::scalar(static_cast<double>(growth_tracker_), DType::I64)},
          {"n_skipped", Tensor::scalar(static_cast<double>(n_skipped_), DType::I64)}};
}

void LossScaler::load_state(const std::vector<std::pair<std::string, Tensor>>& tensors) {
  auto lookup = [&](const std::string& name, DType dtype) -> Tensor {
    auto found = std::find_if(tensors.begin(), tensors.end(), [&](const auto& e) { return e.first == name; });
    WICK_CHECK(found != tensors.end(), "LossScaler::load_state: missing tensor \"", name, "\"");
    const Tensor& t = found->second;
    WICK_CHECK(t.defined() && t.numel() == 1 && t.dim() == 0 && t.dtype() == dtype, "LossScaler::load_state: \"",
               name, "\" must be a 0-d ", dtype_name(dtype), " tensor, got ", t.defined() ? t.describe() : "undefined");
    return t;
  };
  WICK_CHECK(tensors.size() == 3, "LossScaler::load_state: expected tensors {scale, growth_tracker, n_skipped}, got ",
             tensors.size(), " tensors");
  double scale = lookup("scale", DType::F64).item();
  int64_t tracker = lookup("growth_tracker", DType::I64).to_vector<int64_t>()[0];
  int64_t skipped = lookup("n_skipped", DType::I64).to_vector<int64_t>()[0];
  WICK_CHECK(std::isfinite(scale) && scale > 0.0, "LossScaler::load_state: scale must be finite and > 0, got ", scale);
  WICK_CHECK(tracker >= 0 && skipped >= 0, "LossScaler::load_state: negative counter (growth_tracker ", tracker,
             ", n_skipped ", skipped, ")");
  scale_ = scale;
  growth_tracker_ = tracker;
  n_skipped_ = skipped;
}

}  // namespace wick
