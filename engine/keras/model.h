// A Keras-like model around a Module: compile with names, fit on tensors, evaluate, predict, save.
//
//   keras::Model model(std::make_shared<MyNet>());         // any Module with a one-input forward
//   model.compile({.optimizer = "adamw", .learning_rate = 1e-3, .loss = "cross_entropy"});
//   keras::History h = model.fit(x, y, {.epochs = 10, .batch_size = 128, .validation_split = 0.1});
//   std::map<std::string, double> r = model.evaluate(x_test, y_test);   // {"loss", "accuracy"}
//   Tensor logits = model.predict(x_test);                  // eval mode, no graph
//   model.save("model.safetensors");  model.load("model.safetensors");
//
// x is [N, ...] (any dtype the first layer takes), y [N, ...] as the loss wants (class indices
// I64 [N] for cross_entropy). Samples are on any device; batches are moved to the parameters'
// device. Training runs one optimizer step per batch (the last batch of an epoch may be smaller).
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/keras/callbacks.h"
#include "engine/module.h"
#include "engine/optim/optimizer.h"
#include "runtime/tensor.h"

namespace wick::keras {

struct CompileOptions {
  std::string optimizer = "adamw";          // "sgd" | "adamw" | "adamw8bit" (optimizer_names())
  double learning_rate = 1e-3;
  std::optional<double> weight_decay;       // unset: 1e-2 for adamw / adamw8bit, 0 for sgd
  double momentum = 0.0;                    // sgd only
  std::string lr_schedule = "constant";     // lr_schedule_names(); total steps = the fit's steps
  int64_t warmup_steps = 0;
  double max_grad_norm = 0.0;               // 0 = no clipping
  std::string loss = "cross_entropy";       // "cross_entropy" | "mse" | "bce_with_logits"
  std::vector<std::string> metrics = {"accuracy"};  // "accuracy" ("acc"), "mae", "mse"
};

struct FitOptions {
  int64_t epochs = 1;
  int64_t batch_size = 32;
  double validation_split = 0.0;  // the LAST fraction of the samples (before shuffling), as Keras
  Tensor validation_x, validation_y;  // explicit validation data; replaces validation_split
  bool shuffle = true;            // a fresh permutation per epoch, a function of (seed, epoch)
  uint64_t seed = 0;
  int verbose = 1;                // 0 silent, 1 progress bar + epoch line, 2 epoch line only
  std::vector<std::shared_ptr<Callback>> callbacks;
};

struct History {
  std::map<std::string, std::vector<double>> history;  // per epoch: "loss", metrics, "val_*"
  std::vector<double> epoch_seconds;
  int64_t epochs_run() const { return static_cast<int64_t>(epoch_seconds.size()); }
  // The values of one log name; throws WickError listing the names when absent.
  const std::vector<double>& operator[](const std::string& name) const;
};

class Model {
 public:
  explicit Model(std::shared_ptr<Module> module);
  virtual ~Model() = default;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // Checks every name (unknown ones throw WickError (Config) listing the valid ones) and resets
  // the optimizer; its state is built at the next fit over the then-trainable parameters.
  void compile(const CompileOptions& options = {});
  // Trains for options.epochs (fewer when a callback calls request_stop()). Needs compile().
  History fit(const Tensor& x, const Tensor& y, const FitOptions& options = {});
  // The mean loss and metrics over (x, y) in eval mode without recording a graph.
  std::map<std::string, double> evaluate(const Tensor& x, const Tensor& y, int64_t batch_size = 32);
  // The module's outputs for x, in batches, in eval mode under NoGradGuard, concatenated along
  // axis 0 on the parameters' device. The module's training flag is restored afterwards.
  Tensor predict(const Tensor& x, int64_t batch_size = 32);

  // Every parameter into a safetensors file, with the compile options as JSON metadata
  // ("wick.keras.compile"). load() copies a file's tensors into the existing parameters (same
  // tensors, trainable flags kept; the optimizer re-reads them) and compiles with the saved
  // options when the model is not compiled yet. Missing or extra tensors or shape mismatches
  // throw WickError (Data).
  void save(const std::string& path) const;
  void load(const std::string& path);

  // The layers (the root module's children) with type and parameter count, then totals. With an
  // input shape (one sample, without the batch axis) a Sequential also shows output shapes.
  std::string summary_string(const Shape& input_shape = {}) const;
  void summary(const Shape& input_shape = {}, std::FILE* out = stdout) const;

  // Asks fit to stop after the current batch or epoch (for callbacks).
  void request_stop() { stop_requested_ = true; }
  bool stop_requested() const { return stop_requested_; }

  Module& module() const { return *module_; }
  const std::shared_ptr<Module>& module_ptr() const { return module_; }
  bool compiled() const { return compile_.has_value(); }
  const CompileOptions& compile_options() const;
  // The optimizer of the last fit (nullptr before it).
  Optimizer* optimizer() const { return optimizer_.get(); }
  // Where the parameters live (the CPU for a model without parameters).
  Device device() const;

 protected:
  // Sequential builds its container before handing it over.
  Model() = default;
  void set_module(std::shared_ptr<Module> module) { module_ = std::move(module); }
  // The model's layers changed: the optimizer is rebuilt at the next fit.
  void reset_optimizer() { optimizer_.reset(); }
  // True when forward applies the root's children in order (summary can then chain shapes).
  virtual bool chains_children() const { return false; }

 private:
  struct Pass;  // running loss and metrics of one pass over data
  void ensure_optimizer();
  Pass make_pass() const;
  void check_pair(const char* what, const Tensor& x, const Tensor& y) const;
  Logs run_eval(const Tensor& x, const Tensor& y, int64_t batch_size);

  std::shared_ptr<Module> module_;
  std::optional<CompileOptions> compile_;
  std::unique_ptr<Optimizer> optimizer_;
  bool stop_requested_ = false;
};

// The compile options as JSON and back (the metadata save() writes).
std::string compile_options_to_json(const CompileOptions& options);
CompileOptions compile_options_from_json(const std::string& json);

}  // namespace wick::keras
