#include "engine/keras/callbacks.h"

#include <cmath>

#include "engine/autograd/node.h"
#include "engine/keras/model.h"
#include "runtime/error.h"

namespace wick::keras {

// ---- EarlyStopping ----

EarlyStopping::EarlyStopping(std::string monitor, int64_t patience, double min_delta, std::string mode,
                             bool restore_best_weights)
    : monitor_(std::move(monitor)),
      patience_(patience),
      min_delta_(std::fabs(min_delta)),
      restore_best_weights_(restore_best_weights) {
  WICK_CHECK_KIND(Config, mode == "min" || mode == "max" || mode == "auto", "EarlyStopping: unknown mode \"", mode,
                  "\"; valid modes: auto, min, max");
  WICK_CHECK_KIND(Config, patience >= 0, "EarlyStopping: patience must be >= 0, got ", patience);
  maximize_ = mode == "max" || (mode == "auto" && monitor_.find("acc") != std::string::npos);
}

bool EarlyStopping::improved(double value) const {
  if (best_epoch_ < 0) return std::isfinite(value);
  return maximize_ ? value > best_ + min_delta_ : value < best_ - min_delta_;
}

void EarlyStopping::on_train_begin(Model& model) {
  best_ = 0.0;
  best_epoch_ = -1;
  wait_ = 0;
  stopped_epoch_ = -1;
  best_weights_.clear();
}

void EarlyStopping::on_epoch_end(Model& model, int64_t epoch, const Logs& logs) {
  auto it = logs.find(monitor_);
  if (it == logs.end()) {
    std::string names;
    for (const auto& [name, value] : logs) names += (names.empty() ? "" : ", ") + name;
    WICK_FAIL(Config, "EarlyStopping: \"", monitor_, "\" is not logged (logged: ", names,
              "); val_* values need validation data or validation_split");
  }
  if (improved(it->second)) {
    best_ = it->second;
    best_epoch_ = epoch;
    wait_ = 0;
    if (restore_best_weights_) {
      best_weights_.clear();
      for (const auto& [name, tensor] : model.module().named_parameters())
        best_weights_.push_back(autograd::detach(tensor).clone());
    }
    return;
  }
  if (++wait_ >= patience_ && epoch > 0) {
    stopped_epoch_ = epoch;
    model.request_stop();
  }
}

void EarlyStopping::on_train_end(Model& model) {
  if (!restore_best_weights_ || best_weights_.empty() || best_epoch_ < 0) return;
  auto params = model.module().named_parameters();
  WICK_CHECK(params.size() == best_weights_.size(), "EarlyStopping: the model's parameters changed during fit");
  for (size_t i = 0; i < params.size(); ++i) params[i].second.copy_from(best_weights_[i]);
  if (model.optimizer()) model.optimizer()->reload_parameters();
}

// ---- MetricsLogger ----

MetricsLogger::MetricsLogger(std::string path, bool append) : path_(std::move(path)), append_(append) {
  jsonl_ = path_.size() >= 6 && path_.compare(path_.size() - 6, 6, ".jsonl") == 0;
}

MetricsLogger::~MetricsLogger() {
  if (file_) std::fclose(file_);
}

void MetricsLogger::on_train_begin(Model& model) {
  if (file_) std::fclose(file_);
  file_ = std::fopen(path_.c_str(), append_ ? "a" : "w");
  WICK_CHECK_KIND(Config, file_ != nullptr, "MetricsLogger: cannot open ", path_, " for writing");
  columns_.clear();
}

void MetricsLogger::on_epoch_end(Model& model, int64_t epoch, const Logs& logs) {
  if (!file_) return;
  if (jsonl_) {
    std::fprintf(file_, "{\"epoch\": %lld", static_cast<long long>(epoch));
    for (const auto& [name, value] : logs)
      if (std::isfinite(value))
        std::fprintf(file_, ", \"%s\": %.9g", name.c_str(), value);
      else
        std::fprintf(file_, ", \"%s\": null", name.c_str());
    std::fprintf(file_, "}\n");
  } else {
    if (columns_.empty()) {
      std::fprintf(file_, "epoch");
      for (const auto& [name, value] : logs) {
        columns_.push_back(name);
        std::fprintf(file_, ",%s", name.c_str());
      }
      std::fprintf(file_, "\n");
    }
    std::fprintf(file_, "%lld", static_cast<long long>(epoch));
    for (const std::string& column : columns_) {
      auto it = logs.find(column);
      if (it == logs.end())
        std::fprintf(file_, ",");
      else
        std::fprintf(file_, ",%.9g", it->second);
    }
    std::fprintf(file_, "\n");
  }
  // A full disk or an I/O error is reported, not lost (stdio keeps the error flag).
  const bool ok = std::fflush(file_) == 0 && !std::ferror(file_);
  const int error = errno;
  WICK_CHECK_KIND(Data, ok, "MetricsLogger: cannot write ", path_, ": ", std::strerror(error));
}

void MetricsLogger::on_train_end(Model& model) {
  if (file_) std::fclose(file_);
  file_ = nullptr;
}

}  // namespace wick::keras
