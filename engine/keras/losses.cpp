#include "engine/keras/losses.h"

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>

#include "engine/autograd/ops_layout.h"
#include "engine/autograd/ops_loss.h"
#include "runtime/error.h"

namespace wick::keras {
namespace {

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// mse / bce targets: the prediction's shape and dtype (a [N] target for a [N, 1] prediction).
Tensor matched_target(const char* loss, const Tensor& pred, const Tensor& target) {
  WICK_CHECK(target.numel() == pred.numel(), loss, ": target ", target.describe(), " does not match prediction ",
             pred.describe());
  Tensor t = target.shape() == pred.shape() ? target : autograd::reshape(target, pred.shape());
  return t.dtype() == pred.dtype() ? t : autograd::to_dtype(t, pred.dtype());
}

using LossFn = std::function<Tensor(const Tensor& pred, const Tensor& target)>;

const std::map<std::string, LossFn>& loss_registry() {
  static const std::map<std::string, LossFn> registry = {
      {"cross_entropy",
       [](const Tensor& pred, const Tensor& target) { return autograd::cross_entropy_with_logits(pred, target); }},
      {"mse",
       [](const Tensor& pred, const Tensor& target) {
         return autograd::mse_loss(pred, matched_target("mse", pred, target));
       }},
      {"bce_with_logits",
       [](const Tensor& pred, const Tensor& target) {
         return autograd::bce_with_logits(pred, matched_target("bce_with_logits", pred, target));
       }},
  };
  return registry;
}

// ---- metrics ----

bool is_index_target(const Tensor& target) { return is_integral(target.dtype()) && target.dtype() != DType::U8; }

class Accuracy : public Metric {
 public:
  explicit Accuracy(std::string loss) : loss_(std::move(loss)) {}
  std::string name() const override { return "accuracy"; }
  void update(const Tensor& pred, const Tensor& target) override {
    std::vector<float> p = pred.to_vector<float>();
    if (loss_ == "bce_with_logits") {
      std::vector<float> t = target.to_vector<float>();
      WICK_CHECK(t.size() == p.size(), "accuracy: target ", target.describe(), " does not match ", pred.describe());
      for (size_t i = 0; i < p.size(); ++i) sum_ += (p[i] > 0.0f) == (t[i] > 0.5f) ? 1.0 : 0.0;
      count_ += static_cast<double>(p.size());
      return;
    }
    bool classes = pred.dim() == 2 && pred.size(1) > 1;
    if (classes && is_index_target(target)) {
      std::vector<int64_t> t = target.to_vector<int64_t>();
      WICK_CHECK(static_cast<int64_t>(t.size()) == pred.size(0), "accuracy: ", target.describe(),
                 " labels for predictions ", pred.describe());
      count_by_argmax(p, pred.size(1), [&](int64_t row) { return t[static_cast<size_t>(row)]; });
      return;
    }
    if (classes && target.shape() == pred.shape()) {
      std::vector<float> t = target.to_vector<float>();
      int64_t n_classes = pred.size(1);
      count_by_argmax(p, n_classes, [&](int64_t row) { return argmax_row(t, row, n_classes); });
      return;
    }
    std::vector<float> t = target.to_vector<float>();
    WICK_CHECK(t.size() == p.size(), "accuracy: target ", target.describe(), " does not match ", pred.describe());
    for (size_t i = 0; i < p.size(); ++i) sum_ += std::nearbyint(p[i]) == std::nearbyint(t[i]) ? 1.0 : 0.0;
    count_ += static_cast<double>(p.size());
  }

 private:
  static int64_t argmax_row(const std::vector<float>& values, int64_t row, int64_t n_classes) {
    const float* r = values.data() + row * n_classes;
    int64_t best = 0;
    for (int64_t c = 1; c < n_classes; ++c)
      if (r[c] > r[best]) best = c;  // first index on ties, as argmax
    return best;
  }
  template <typename Label>
  void count_by_argmax(const std::vector<float>& p, int64_t n_classes, const Label& label) {
    int64_t n_rows = static_cast<int64_t>(p.size()) / n_classes;
    for (int64_t row = 0; row < n_rows; ++row) sum_ += argmax_row(p, row, n_classes) == label(row) ? 1.0 : 0.0;
    count_ += static_cast<double>(n_rows);
  }

  std::string loss_;
};

class ErrorMetric : public Metric {
 public:
  explicit ErrorMetric(bool squared) : squared_(squared) {}
  std::string name() const override { return squared_ ? "mse" : "mae"; }
  void update(const Tensor& pred, const Tensor& target) override {
    std::vector<float> p = pred.to_vector<float>(), t = target.to_vector<float>();
    WICK_CHECK(t.size() == p.size(), name(), ": target ", target.describe(), " does not match ", pred.describe());
    for (size_t i = 0; i < p.size(); ++i) {
      double d = static_cast<double>(p[i]) - static_cast<double>(t[i]);
      sum_ += squared_ ? d * d : std::fabs(d);
    }
    count_ += static_cast<double>(p.size());
  }

 private:
  bool squared_;
};

}  // namespace

std::vector<std::string> loss_names() {
  std::vector<std::string> names;
  for (const auto& [name, fn] : loss_registry()) names.push_back(name);
  return names;
}

void check_loss_name(const std::string& name) {
  WICK_CHECK_KIND(Config, loss_registry().count(name) != 0, "keras: unknown loss \"", name,
                  "\"; valid losses: ", joined(loss_names()));
}

Tensor compute_loss(const std::string& name, const Tensor& pred, const Tensor& target) {
  check_loss_name(name);
  return loss_registry().at(name)(pred, target);
}

std::vector<std::string> metric_names() { return {"accuracy", "acc", "mae", "mse"}; }

std::unique_ptr<Metric> make_metric(const std::string& name, const std::string& loss) {
  if (name == "accuracy" || name == "acc") return std::make_unique<Accuracy>(loss);
  if (name == "mae") return std::make_unique<ErrorMetric>(false);
  if (name == "mse") return std::make_unique<ErrorMetric>(true);
  WICK_FAIL(Config, "keras: unknown metric \"", name, "\"; valid metrics: ", joined(metric_names()));
}

}  // namespace wick::keras
