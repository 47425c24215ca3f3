#include "engine/autograd/ops_loss.h"

#include "engine/autograd/node.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/reduce.h"
#include "runtime/ops/softmax.h"

namespace wick::autograd {
namespace {

Tensor reduce_loss(const Tensor& per_element, Reduction reduction) {
  if (reduction == Reduction::Mean) return wick::mean(per_element);
  if (reduction == Reduction::Sum) return wick::sum(per_element);
  return per_element;
}

// The gradient of each per-element loss given the gradient of the reduced loss: g broadcast to
// `shape`, divided by the element count for Mean. A stride-0 view for Mean and Sum.
Tensor per_element_grad(const Tensor& grad, const Shape& shape, Reduction reduction) {
  if (reduction == Reduction::None) return grad;
  Tensor g = reduction == Reduction::Mean ? wick::div(grad, static_cast<double>(numel(shape))) : grad;
  return g.reshape(Shape(shape.size(), 1)).expand(shape);
}

void check_floating(const Tensor& t, const char* op, const char* what) {
  WICK_CHECK(t.defined(), op, ": undefined ", what);
  WICK_CHECK(is_floating(t.dtype()), op, ": ", what, " must be floating (f32, f64, bf16, f16), got ", t.describe());
}

// ---- mse ----
class MseLossNode : public Node {
 public:
  MseLossNode(Tensor diff, Reduction reduction, bool need_pred, bool need_target)
      : diff_(std::move(diff)), reduction_(reduction), need_pred_(need_pred), need_target_(need_target) {}
  const char* name() const override { return "mse_loss"; }
  // d (p - t)^2 = 2 (p - t) (dp - dt)
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    Tensor g = wick::mul(wick::mul(per_element_grad(grad[0], diff_.shape(), reduction_), diff_), 2.0);
    return {need_pred_ ? g : Tensor(), need_target_ ? wick::neg(g) : Tensor()};
  }
  void release() override { diff_ = Tensor(); }

 private:
  Tensor diff_;
  Reduction reduction_;
  bool need_pred_, need_target_;
};

// ---- cross-entropy ----
class CrossEntropyNode : public Node {
 public:
  CrossEntropyNode(Tensor log_probs, Tensor q, Reduction reduction, double target_scale, bool need_target)
      : log_probs_(std::move(log_probs)), q_(std::move(q)), reduction_(reduction), target_scale_(target_scale),
        need_target_(need_target) {}
  const char* name() const override { return "cross_entropy_with_logits"; }
  // d/dlogits = softmax sum_c(q) - q (softmax - q for one-hot q); d/dtarget = -(1 - s) log_softmax
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    Shape sample_shape = log_probs_.shape();
    sample_shape.erase(sample_shape.begin() + 1);
    Tensor g = per_element_grad(grad[0], sample_shape, reduction_).unsqueeze(1);  // [N, 1, d...]
    Tensor q_total = wick::sum(q_, {1}, /*keepdim=*/true);
    Tensor grad_logits = wick::mul(wick::sub(wick::mul(wick::exp(log_probs_), q_total), q_), g);
    Tensor grad_target;
    if (need_target_) grad_target = wick::mul(wick::mul(log_probs_, g), -target_scale_);
    return {grad_logits, grad_target};
  }
  void release() override { log_probs_ = q_ = Tensor(); }

 private:
  Tensor log_probs_, q_;
  Reduction reduction_;
  double target_scale_;
  bool need_target_;
};

// ---- binary cross-entropy ----
class BceWithLogitsNode : public Node {
 public:
  BceWithLogitsNode(Tensor x, Tensor t, Tensor pos_weight, Reduction reduction, bool need_x, bool need_t)
      : x_(std::move(x)), t_(std::move(t)), pos_weight_(std::move(pos_weight)), reduction_(reduction),
        need_x_(need_x), need_t_(need_t) {}
  const char* name() const override { return "bce_with_logits"; }
  // l = (1 - t) x + w softplus(-x), w = 1 + (p - 1) t:
  // dl/dx = (1 - t) - w sigmoid(-x) (= sigmoid(x) - t without p), dl/dt = -x + (p - 1) softplus(-x)
  std::vector<Tensor> backward(const std::vector<Tensor>& grad) override {
    Tensor g = per_element_grad(grad[0], x_.shape(), reduction_);
    Tensor grad_x, grad_t;
    if (!pos_weight_.defined()) {
      if (need_x_) grad_x = wick::mul(wick::sub(wick::sigmoid(x_), t_), g);
      if (need_t_) grad_t = wick::neg(wick::mul(x_, g));
    } else {
      Tensor p_minus_1 = wick::sub(pos_weight_, 1.0);
      if (need_x_) {
        Tensor w = wick::add(wick::mul(p_minus_1, t_), 1.0);
        Tensor d = wick::sub(wick::sub(1.0, t_), wick::mul(w, wick::sigmoid(wick::neg(x_))));
        grad_x = sum_to_shape(wick::mul(d, g), x_.shape());
      }
      if (need_t_) {
        Tensor d = wick::sub(wick::mul(p_minus_1, softplus_neg(x_)), x_);
        grad_t = sum_to_shape(wick::mul(d, g), t_.shape());
      }
    }
    return {grad_x, grad_t};
  }
  void release() override { x_ = t_ = pos_weight_ = Tensor(); }

  // softplus(-x) = log(1 + exp(-|x|)) + max(-x, 0), no overflow.
  static Tensor softplus_neg(const Tensor& x) {
    return wick::add(wick::log(wick::add(wick::exp(wick::neg(wick::abs(x))), 1.0)), wick::maximum(wick::neg(x), 0.0));
  }

 private:
  Tensor x_, t_, pos_weight_;
  Reduction reduction_;
  bool need_x_, need_t_;
};

}  // namespace

Tensor mse_loss(const Tensor& pred, const Tensor& target, Reduction reduction) {
  check_floating(pred, "mse_loss", "pred");
  check_floating(target, "mse_loss", "target");
  WICK_CHECK(pred.shape() == target.shape(), "mse_loss: pred ", pred.describe(), " and target ", target.describe(),
             " must have the same shape");
  Tensor diff = wick::sub(pred, target);
  Tensor out = reduce_loss(wick::square(diff), reduction);
  if (needs_grad({pred, target}))
    record(std::make_shared<MseLossNode>(diff, reduction, requires_grad(pred), requires_grad(target)),
           {pred, target}, out);
  return out;
}

Tensor cross_entropy_with_logits(const Tensor& logits, const Tensor& target, Reduction reduction,
                                 double label_smoothing) {
  const char* op = "cross_entropy_with_logits";
  check_floating(logits, op, "logits");
  WICK_CHECK(target.defined(), op, ": undefined target");
  WICK_CHECK(logits.dim() >= 2, op, ": logits must be [N, C, ...], got ", logits.describe());
  WICK_CHECK(logits.device() == target.device(), op, ": logits ", logits.describe(), " and target ",
             target.describe(), " are on different devices");
  WICK_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, op, ": label_smoothing must lie in [0, 1], got ",
             label_smoothing);
  const int64_t n_classes = logits.shape()[1];
  const double smoothing_share = label_smoothing / static_cast<double>(n_classes);
  Tensor log_probs = wick::log_softmax(logits, 1);
  Tensor q;
  if (is_floating(target.dtype())) {
    WICK_CHECK(target.shape() == logits.shape(), op, ": probability target ", target.describe(),
               " must have the logits' shape ", logits.describe());
    q = wick::add(wick::mul(target.to(log_probs.dtype()), 1.0 - label_smoothing), smoothing_share);
  } else {
    WICK_CHECK(target.dtype() == DType::I64 || target.dtype() == DType::I32, op,
               ": class-index target must be I32 or I64, got ", target.describe());
    Shape sample_shape = logits.shape();
    sample_shape.erase(sample_shape.begin() + 1);
    WICK_CHECK(target.shape() == sample_shape, op, ": class-index target ", target.describe(), " must have shape ",
               sample_shape, " for logits ", logits.describe());
    if (target.device().is_cpu() && target.numel() > 0) {
      int64_t low = wick::min(target).to(DType::I64).to_vector<int64_t>()[0];
      int64_t high = wick::max(target).to(DType::I64).to_vector<int64_t>()[0];
      WICK_CHECK(low >= 0 && high < n_classes, op, ": class index out of range [0, ", n_classes, "): found ",
                 low < 0 ? low : high);
    }
    Shape class_shape(static_cast<size_t>(logits.dim()), 1);
    class_shape[1] = n_classes;
    Tensor classes = wick::arange(0, static_cast<double>(n_classes), 1, target.dtype(), target.device());
    Tensor one_hot = wick::eq(target.unsqueeze(1), classes.reshape(class_shape)).to(log_probs.dtype());
    q = wick::add(wick::mul(one_hot, 1.0 - label_smoothing), smoothing_share);
  }
  Tensor out = reduce_loss(wick::neg(wick::sum(wick::mul(q, log_probs), {1})), reduction);
  if (needs_grad({logits, target})) {
    bool need_target = requires_grad(target);
    record(std::make_shared<CrossEntropyNode>(log_probs, q, reduction, 1.0 - label_smoothing, need_target),
           {logits, target}, out);
  }
  return out;
}

Tensor bce_with_logits(const Tensor& logits, const Tensor& target, Reduction reduction, const Tensor& pos_weight) {
  const char* op = "bce_with_logits";
  check_floating(logits, op, "logits");
  check_floating(target, op, "target");
  WICK_CHECK(logits.shape() == target.shape(), op, ": logits ", logits.describe(), " and target ",
             target.describe(), " must have the same shape");
  if (pos_weight.defined()) {
    check_floating(pos_weight, op, "pos_weight");
    bool fits = pos_weight.dim() <= logits.dim();
    for (int64_t a = 1; fits && a <= pos_weight.dim(); ++a) {
      int64_t extent = pos_weight.shape()[static_cast<size_t>(pos_weight.dim() - a)];
      fits = extent == 1 || extent == logits.shape()[static_cast<size_t>(logits.dim() - a)];
    }
    WICK_CHECK(fits, op, ": pos_weight ", pos_weight.describe(), " does not broadcast to logits ", logits.describe());
    WICK_CHECK(pos_weight.device() == logits.device(), op, ": pos_weight ", pos_weight.describe(),
               " and logits ", logits.describe(), " are on different devices");
  }
  const Tensor& x = logits;
  const Tensor& t = target;
  Tensor per_element;
  if (!pos_weight.defined()) {
    // max(x, 0) - x t + log(1 + exp(-|x|))
    per_element = wick::add(wick::sub(wick::maximum(x, 0.0), wick::mul(x, t)),
                            wick::log(wick::add(wick::exp(wick::neg(wick::abs(x))), 1.0)));
  } else {
    Tensor w = wick::add(wick::mul(wick::sub(pos_weight, 1.0), t), 1.0);
    per_element = wick::add(wick::mul(wick::sub(1.0, t), x), wick::mul(w, BceWithLogitsNode::softplus_neg(x)));
  }
  Tensor out = reduce_loss(per_element, reduction);
  if (needs_grad({logits, target}))
    record(std::make_shared<BceWithLogitsNode>(detach(x), detach(t), detach(pos_weight), reduction,
                                               requires_grad(logits), requires_grad(target)),
           {logits, target}, out);
  return out;
}

}  // namespace wick::autograd
