// Losses and metrics for the Keras-like API, looked up by name.
//
//   Tensor loss = compute_loss("cross_entropy", logits, labels);    // 0-d, differentiable
//   std::unique_ptr<Metric> acc = make_metric("accuracy", "cross_entropy");
//   acc->update(logits, labels);  ...;  double a = acc->result();    // over every update since reset
//
// Losses: "cross_entropy" (logits [N, C, ...], targets class indices I32/I64 [N, ...] or
// probabilities of the logits' shape), "mse" and "bce_with_logits" (targets are reshaped to the
// prediction's shape when they hold as many elements, and cast to its dtype). All reduce by mean.
// Metrics: "accuracy" (alias "acc"), "mae", "mse"; results are host doubles.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace wick::keras {

// The mean loss `name` of `pred` against `target`, recorded for autograd when pred requires a
// gradient. Unknown names throw WickError (Config) listing loss_names().
Tensor compute_loss(const std::string& name, const Tensor& pred, const Tensor& target);
std::vector<std::string> loss_names();
// Throws WickError (Config) when `name` is not a loss (used by Model::compile).
void check_loss_name(const std::string& name);

// A streaming metric: update() with each batch (any device; values are read on the host), result()
// is the value over all updates since the last reset() (0 before any update).
class Metric {
 public:
  virtual ~Metric() = default;
  virtual std::string name() const = 0;
  virtual void update(const Tensor& pred, const Tensor& target) = 0;
  double result() const { return count_ > 0 ? sum_ / count_ : 0.0; }
  void reset() { sum_ = 0.0, count_ = 0.0; }

 protected:
  double sum_ = 0.0, count_ = 0.0;
};

// accuracy: with integer targets, argmax over axis 1 of pred against the target index; with a
// "bce_with_logits" loss, (pred > 0) against (target > 0.5) per element; with probability targets
// of pred's shape [N, C > 1], argmax of both; otherwise round(pred) == round(target) per element.
// mae / mse: mean |pred - target| / (pred - target)^2 per element. Unknown names throw listing
// metric_names(). `loss` is the compiled loss's name (it decides how accuracy reads logits).
std::unique_ptr<Metric> make_metric(const std::string& name, const std::string& loss);
std::vector<std::string> metric_names();

}  // namespace wick::keras
