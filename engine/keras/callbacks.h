// Callbacks for Model::fit: hooks at epoch and batch boundaries, early stopping, a metrics log.
//
//   auto stop = std::make_shared<keras::EarlyStopping>("val_loss", /*patience=*/2);
//   auto log = std::make_shared<keras::MetricsLogger>("output/history.csv");   // or .jsonl
//   model.fit(x, y, {.epochs = 50, .validation_split = 0.1, .callbacks = {stop, log}});
//   if (stop->stopped_epoch() >= 0) ...
//
// A callback ends training with model.request_stop(): fit finishes the current batch (when asked
// from on_batch_end) or epoch and returns. Epochs are numbered from 0; logs hold "loss", the
// metrics, and with validation data "val_loss", "val_<metric>".
#pragma once

#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "runtime/tensor.h"

namespace wick::keras {

class Model;
using Logs = std::map<std::string, double>;

class Callback {
 public:
  virtual ~Callback() = default;
  virtual void on_train_begin(Model& model) {}
  virtual void on_epoch_begin(Model& model, int64_t epoch) {}
  // `logs` are the running epoch averages so far ("loss" and the metrics).
  virtual void on_batch_end(Model& model, int64_t batch, const Logs& logs) {}
  virtual void on_epoch_end(Model& model, int64_t epoch, const Logs& logs) {}
  virtual void on_train_end(Model& model) {}
};

// Stops when `monitor` has not improved by more than min_delta for `patience` epochs in a row
// (Keras's rule: after an epoch without improvement that brings the count to patience, never at
// epoch 0).
// mode "min", "max" or "auto" (max when the name contains "acc", else min). With
// restore_best_weights the parameters of the best epoch are copied back when training ends.
// A monitor missing from the logs throws WickError (Config) naming the logged values.
class EarlyStopping : public Callback {
 public:
  explicit EarlyStopping(std::string monitor = "val_loss", int64_t patience = 0, double min_delta = 0.0,
                         std::string mode = "auto", bool restore_best_weights = false);
  void on_train_begin(Model& model) override;
  void on_epoch_end(Model& model, int64_t epoch, const Logs& logs) override;
  void on_train_end(Model& model) override;

  int64_t stopped_epoch() const { return stopped_epoch_; }  // -1 when it never stopped training
  int64_t best_epoch() const { return best_epoch_; }
  double best() const { return best_; }

 private:
  bool improved(double value) const;

  std::string monitor_;
  int64_t patience_;
  double min_delta_;
  bool maximize_;
  bool restore_best_weights_;
  double best_ = 0.0;
  int64_t best_epoch_ = -1, wait_ = 0, stopped_epoch_ = -1;
  std::vector<Tensor> best_weights_;  // copies, in named_parameters() order
};

// Appends one record per epoch to `path`: JSON lines when the name ends in ".jsonl" ({"epoch": 0,
// "loss": ...}), else CSV with a header row (epoch first, then the log names in sorted order).
// The file is truncated at on_train_begin unless `append`.
class MetricsLogger : public Callback {
 public:
  explicit MetricsLogger(std::string path, bool append = false);
  ~MetricsLogger() override;
  MetricsLogger(const MetricsLogger&) = delete;
  MetricsLogger& operator=(const MetricsLogger&) = delete;
  void on_train_begin(Model& model) override;
  void on_epoch_end(Model& model, int64_t epoch, const Logs& logs) override;
  void on_train_end(Model& model) override;

 private:
  std::string path_;
  bool append_, jsonl_;
  std::FILE* file_ = nullptr;
  std::vector<std::string> columns_;  // CSV: fixed by the first record
};

}  // namespace wick::keras
