#include "engine/keras/model.h"

#include "engine/autograd/rng_state.h"
#include "runtime/philox.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "engine/autograd/backward.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/keras/batching.h"
#include "engine/keras/losses.h"
#include "engine/optim/lr_schedule.h"
#include "engine/progress.h"
#include "runtime/error.h"
#include "runtime/ops/join.h"
#include "runtime/safetensors.h"

namespace wick::keras {
namespace {

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Restores the module's training flag when a scope ends.
class TrainingFlagGuard {
 public:
  TrainingFlagGuard(Module& module, bool training) : module_(module), previous_(module.is_training()) {
    module_.train(training);
  }
  ~TrainingFlagGuard() { module_.train(previous_); }
  TrainingFlagGuard(const TrainingFlagGuard&) = delete;
  TrainingFlagGuard& operator=(const TrainingFlagGuard&) = delete;

 private:
  Module& module_;
  bool previous_;
};

std::string with_thousands(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace

// ---- History ----

const std::vector<double>& History::operator[](const std::string& name) const {
  auto it = history.find(name);
  if (it == history.end()) {
    std::vector<std::string> names;
    for (const auto& [key, values] : history) names.push_back(key);
    WICK_FAIL(Usage, "History: no values named \"", name, "\"; logged: ", joined(names));
  }
  return it->second;
}

// ---- one pass over data: weighted loss and streaming metrics ----

struct Model::Pass {
  double loss_sum = 0.0;
  int64_t n_samples = 0;
  std::vector<std::unique_ptr<Metric>> metrics;

  void update(double batch_loss, int64_t batch_n, const Tensor& pred, const Tensor& target) {
    loss_sum += batch_loss * static_cast<double>(batch_n);
    n_samples += batch_n;
    for (auto& metric : metrics) metric->update(pred, target);
  }
  Logs logs(const std::string& prefix = "") const {
    Logs out;
    out[prefix + "loss"] = n_samples > 0 ? loss_sum / static_cast<double>(n_samples) : 0.0;
    for (const auto& metric : metrics) out[prefix + metric->name()] = metric->result();
    return out;
  }
  ProgressBar::Values values() const {
    ProgressBar::Values out;
    out.emplace_back("loss", n_samples > 0 ? loss_sum / static_cast<double>(n_samples) : 0.0);
    for (const auto& metric : metrics) out.emplace_back(metric->name(), metric->result());
    return out;
  }
};

Model::Pass Model::make_pass() const {
  Pass pass;
  for (const std::string& name : compile_options().metrics) pass.metrics.push_back(make_metric(name, compile_->loss));
  return pass;
}

// ---- Model ----

Model::Model(std::shared_ptr<Module> module) : module_(std::move(module)) {
  WICK_CHECK(module_ != nullptr, "keras::Model: the module is null");
}

const CompileOptions& Model::compile_options() const {
  WICK_CHECK_KIND(Config, compile_.has_value(), "keras::Model: call compile() before fit() or evaluate()");
  return *compile_;
}

Device Model::device() const {
  auto params = module_->named_parameters();
  return params.empty() ? Device::cpu() : params.front().second.device();
}

void Model::compile(const CompileOptions& options) {
  std::vector<std::string> optimizers = optimizer_names();
  WICK_CHECK_KIND(Config, std::find(optimizers.begin(), optimizers.end(), options.optimizer) != optimizers.end(),
                  "keras: unknown optimizer \"", options.optimizer, "\"; valid optimizers: ", joined(optimizers));
  check_loss_name(options.loss);
  for (const std::string& metric : options.metrics) make_metric(metric, options.loss);
  WICK_CHECK_KIND(Config, options.learning_rate >= 0.0 && std::isfinite(options.learning_rate),
                  "keras: learning_rate must be finite and >= 0, got ", options.learning_rate);
  WICK_CHECK_KIND(Config, options.max_grad_norm >= 0.0, "keras: max_grad_norm must be >= 0, got ",
                  options.max_grad_norm);
  // Validates the schedule's name and arguments (an unknown name lists the valid ones).
  make_lr_schedule({.name = options.lr_schedule, .base_lr = options.learning_rate,
                    .warmup_steps = options.warmup_steps, .total_steps = options.warmup_steps + 1});
  compile_ = options;
  optimizer_.reset();
}

void Model::ensure_optimizer() {
  if (optimizer_) return;
  const CompileOptions& c = compile_options();
  NamedParameters params = module_->trainable_parameters();
  WICK_CHECK_KIND(Config, !params.empty(), "keras::Model::fit: the model has no trainable parameter (",
                  module_->n_parameters(), " parameters, all frozen)");
  OptimizerConfig config;
  config.weight_decay = static_cast<float>(c.weight_decay.value_or(c.optimizer == "sgd" ? 0.0 : 1e-2));
  config.momentum = static_cast<float>(c.momentum);
  config.max_grad_norm = static_cast<float>(c.max_grad_norm);
  optimizer_ = make_optimizer(c.optimizer, params, config);
}

void Model::check_pair(const char* what, const Tensor& x, const Tensor& y) const {
  WICK_CHECK(x.defined() && y.defined() && x.dim() >= 1 && y.dim() >= 1, "keras::Model::", what,
             ": x and y need a sample axis");
  WICK_CHECK(x.size(0) == y.size(0), "keras::Model::", what, ": x ", x.describe(), " and y ", y.describe(),
             " hold different numbers of samples");
}

History Model::fit(const Tensor& x, const Tensor& y, const FitOptions& options) {
  const CompileOptions& c = compile_options();
  check_pair("fit", x, y);
  WICK_CHECK(options.epochs >= 0 && options.batch_size >= 1, "keras::Model::fit: epochs ", options.epochs,
             " and batch_size ", options.batch_size, " must be >= 0 and >= 1");
  Tensor train_x = x, train_y = y, val_x = options.validation_x, val_y = options.validation_y;
  if (val_x.defined() || val_y.defined()) {
    check_pair("fit (validation data)", val_x, val_y);
  } else if (options.validation_split > 0.0) {
    std::tie(train_x, val_x) = split_last(x, options.validation_split);
    std::tie(train_y, val_y) = split_last(y, options.validation_split);
    WICK_CHECK(val_x.size(0) > 0, "keras::Model::fit: validation_split ", options.validation_split, " of ",
               x.size(0), " samples leaves no validation sample");
  } else {
    WICK_CHECK(options.validation_split == 0.0, "validation_split must be in [0, 1), got ",
               options.validation_split);
  }
  int64_t n_train = train_x.size(0);
  WICK_CHECK(n_train > 0, "keras::Model::fit: no training sample");
  ensure_optimizer();
  Device device = this->device();
  int64_t steps_per_epoch = (n_train + options.batch_size - 1) / options.batch_size;
  int64_t first_step = optimizer_->steps_taken();
  LrSchedule schedule = make_lr_schedule({.name = c.lr_schedule, .base_lr = c.learning_rate,
                                          .warmup_steps = c.warmup_steps,
                                          .total_steps = first_step + std::max<int64_t>(1, options.epochs * steps_per_epoch)});

  History history;
  stop_requested_ = false;
  for (auto& callback : options.callbacks) callback->on_train_begin(*this);
  for (int64_t epoch = 0; epoch < options.epochs && !stop_requested_; ++epoch) {
    auto start = std::chrono::steady_clock::now();
    for (auto& callback : options.callbacks) callback->on_epoch_begin(*this, epoch);
    std::vector<int64_t> order;
    if (options.shuffle) order = shuffled_order(n_train, options.seed, static_cast<uint64_t>(epoch));
    std::string label = "epoch " + std::to_string(epoch + 1) + "/" + std::to_string(options.epochs);
    std::unique_ptr<ProgressBar> bar;
    if (options.verbose == 1) bar = std::make_unique<ProgressBar>(steps_per_epoch, label, stdout);
    Pass pass = make_pass();
    {
      TrainingFlagGuard training(*module_, true);
      for (int64_t step = 0; step < steps_per_epoch; ++step) {
        int64_t begin = step * options.batch_size, count = std::min(options.batch_size, n_train - begin);
        Tensor xb = take_rows(train_x, order, begin, count, device);
        Tensor yb = take_rows(train_y, order, begin, count, device);
        // Random layers (dropout) draw from a stream of (seed, optimizer step): reproducible runs.
        autograd::current_rng() = {derive_stream(options.seed, static_cast<uint64_t>(optimizer_->steps_taken()), 0,
                                                 RngPurpose::Dropout),
                                   0};
        Tensor pred = module_->forward(xb);
        Tensor loss = compute_loss(c.loss, pred, yb);
        autograd::GradientStore grads = autograd::backward(loss);
        optimizer_->step(grads, static_cast<float>(schedule.lr_at(optimizer_->steps_taken())));
        double loss_value = loss.item();
        pass.update(loss_value, count, autograd::detach(pred), yb);
        if (bar) bar->update(step + 1, pass.values());
        Logs running = pass.logs();
        for (auto& callback : options.callbacks) callback->on_batch_end(*this, step, running);
        if (stop_requested_) break;
      }
    }
    Logs logs = pass.logs();
    ProgressBar::Values extra;
    if (val_x.defined()) {
      for (const auto& [name, value] : run_eval(val_x, val_y, options.batch_size)) {
        logs["val_" + name] = value;
        extra.emplace_back("val_" + name, value);
      }
    }
    double seconds = seconds_since(start);
    if (bar) {
      bar->finish(extra);
    } else if (options.verbose == 2) {
      std::string line = label + " - " + format_duration(seconds);
      ProgressBar::Values all = pass.values();
      all.insert(all.end(), extra.begin(), extra.end());
      for (const auto& [name, value] : all) {
        char item[96];
        std::snprintf(item, sizeof(item), " - %s: %.4g", name.c_str(), value);
        line += item;
      }
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    }
    for (const auto& [name, value] : logs) history.history[name].push_back(value);
    history.epoch_seconds.push_back(seconds);
    for (auto& callback : options.callbacks) callback->on_epoch_end(*this, epoch, logs);
  }
  for (auto& callback : options.callbacks) callback->on_train_end(*this);
  return history;
}

Logs Model::run_eval(const Tensor& x, const Tensor& y, int64_t batch_size) {
  const CompileOptions& c = compile_options();
  check_pair("evaluate", x, y);
  WICK_CHECK(batch_size >= 1, "keras::Model::evaluate: batch_size must be >= 1, got ", batch_size);
  Device device = this->device();
  TrainingFlagGuard eval(*module_, false);
  autograd::NoGradGuard no_grad;
  Pass pass = make_pass();
  int64_t n = x.size(0);
  for (int64_t begin = 0; begin < n; begin += batch_size) {
    int64_t count = std::min(batch_size, n - begin);
    Tensor xb = take_rows(x, {}, begin, count, device), yb = take_rows(y, {}, begin, count, device);
    Tensor pred = module_->forward(xb);
    pass.update(compute_loss(c.loss, pred, yb).item(), count, pred, yb);
  }
  return pass.logs();
}

std::map<std::string, double> Model::evaluate(const Tensor& x, const Tensor& y, int64_t batch_size) {
  return run_eval(x, y, batch_size);
}

Tensor Model::predict(const Tensor& x, int64_t batch_size) {
  WICK_CHECK(x.defined() && x.dim() >= 1, "keras::Model::predict: x needs a sample axis");
  WICK_CHECK(batch_size >= 1, "keras::Model::predict: batch_size must be >= 1, got ", batch_size);
  Device device = this->device();
  TrainingFlagGuard eval(*module_, false);
  autograd::NoGradGuard no_grad;
  std::vector<Tensor> outputs;
  int64_t n = x.size(0);
  for (int64_t begin = 0; begin < n; begin += batch_size)
    outputs.push_back(module_->forward(take_rows(x, {}, begin, std::min(batch_size, n - begin), device)));
  WICK_CHECK(!outputs.empty(), "keras::Model::predict: x holds no sample");
  return outputs.size() == 1 ? outputs.front() : concat(outputs, 0);
}

// ---- save / load ----

std::string compile_options_to_json(const CompileOptions& o) {
  nlohmann::json j = {{"optimizer", o.optimizer},       {"learning_rate", o.learning_rate},
                      {"momentum", o.momentum},         {"lr_schedule", o.lr_schedule},
                      {"warmup_steps", o.warmup_steps}, {"max_grad_norm", o.max_grad_norm},
                      {"loss", o.loss},                 {"metrics", o.metrics}};
  j["weight_decay"] = o.weight_decay ? nlohmann::json(*o.weight_decay) : nlohmann::json(nullptr);
  return j.dump();
}

CompileOptions compile_options_from_json(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  WICK_CHECK_KIND(Data, j.is_object(), "keras: compile options are not a JSON object: ", text);
  CompileOptions o;
  try {
    o.optimizer = j.value("optimizer", o.optimizer);
    o.learning_rate = j.value("learning_rate", o.learning_rate);
    o.momentum = j.value("momentum", o.momentum);
    o.lr_schedule = j.value("lr_schedule", o.lr_schedule);
    o.warmup_steps = j.value("warmup_steps", o.warmup_steps);
    o.max_grad_norm = j.value("max_grad_norm", o.max_grad_norm);
    o.loss = j.value("loss", o.loss);
    o.metrics = j.value("metrics", o.metrics);
    if (j.contains("weight_decay") && !j["weight_decay"].is_null()) o.weight_decay = j["weight_decay"].get<double>();
  } catch (const nlohmann::json::exception& error) {
    WICK_FAIL(Data, "keras: bad compile options ", text, ": ", error.what());
  }
  return o;
}

void Model::save(const std::string& path) const {
  std::map<std::string, std::string> metadata = {{"format", "pt"}, {"wick.keras.version", "1"}};
  if (compile_) metadata["wick.keras.compile"] = compile_options_to_json(*compile_);
  save_parameters(*module_, path, /*trainable_only=*/false, metadata);
}

void Model::load(const std::string& path) {
  SafetensorsFile file = SafetensorsFile::open(path);
  std::set<std::string> used;
  for (auto& [name, slot] : parameter_slots(*module_)) {
    WICK_CHECK_KIND(Data, file.contains(name), path, ": no tensor for parameter '", name, "'");
    Tensor stored = file.get(name);
    WICK_CHECK_KIND(Data, stored.shape() == slot->shape(), path, ": tensor '", name, "' has shape ", stored.shape(),
                    " but the parameter is ", slot->describe());
    slot->copy_from(stored);
    used.insert(name);
  }
  for (const std::string& name : file.names())
    WICK_CHECK_KIND(Data, used.count(name) != 0, path, ": tensor '", name, "' matches no parameter of the model");
  if (optimizer_) optimizer_->reload_parameters();
  auto it = file.metadata().find("wick.keras.compile");
  if (!compile_ && it != file.metadata().end()) compile(compile_options_from_json(it->second));
}

// ---- summary ----

std::string Model::summary_string(const Shape& input_shape) const {
  struct Row {
    std::string name, type, output;
    int64_t n_params;
  };
  std::vector<Row> rows;
  const auto& children = module_->children();
  if (children.empty()) {
    rows.push_back({"(model)", module_->type_name(), "", module_->n_parameters()});
  } else {
    for (const auto& [name, child] : children) rows.push_back({name, child->type_name(), "", child->n_parameters()});
  }
  if (!input_shape.empty() && chains_children() && !children.empty()) {
    TrainingFlagGuard eval(*module_, false);
    autograd::NoGradGuard no_grad;
    Shape batch_shape = input_shape;
    batch_shape.insert(batch_shape.begin(), 1);
    Tensor h = Tensor::empty(batch_shape, DType::F32, device());
    h.copy_from(Tensor::scalar(0.0));
    for (size_t i = 0; i < children.size(); ++i) {
      h = children[i].second->forward(h);
      std::string shape = "[N";
      for (int64_t axis = 1; axis < h.dim(); ++axis) shape += ", " + std::to_string(h.size(axis));
      rows[i].output = shape + "]";
    }
  }
  size_t name_width = 5, type_width = 4, output_width = 12;
  for (const Row& r : rows) {
    name_width = std::max(name_width, r.name.size());
    type_width = std::max(type_width, r.type.size());
    output_width = std::max(output_width, r.output.size());
  }
  std::string out = "Model: " + module_->type_name() + "\n";
  char line[512];
  std::snprintf(line, sizeof(line), "%-*s  %-*s  %-*s  %12s\n", static_cast<int>(name_width), "Layer",
                static_cast<int>(type_width), "Type", static_cast<int>(output_width), "Output shape", "Params");
  out += line;
  out += std::string(name_width + type_width + output_width + 18, '-') + "\n";
  for (const Row& r : rows) {
    std::snprintf(line, sizeof(line), "%-*s  %-*s  %-*s  %12s\n", static_cast<int>(name_width), r.name.c_str(),
                  static_cast<int>(type_width), r.type.c_str(), static_cast<int>(output_width), r.output.c_str(),
                  with_thousands(r.n_params).c_str());
    out += line;
  }
  int64_t total = module_->n_parameters(), trainable = module_->n_parameters(true);
  int64_t bytes = 0;
  for (const auto& [name, tensor] : module_->named_parameters()) bytes += static_cast<int64_t>(tensor.nbytes());
  std::snprintf(line, sizeof(line), "Total params: %s (%.1f KiB)\nTrainable params: %s\nNon-trainable params: %s\n",
                with_thousands(total).c_str(), static_cast<double>(bytes) / 1024.0, with_thousands(trainable).c_str(),
                with_thousands(total - trainable).c_str());
  out += line;
  return out;
}

void Model::summary(const Shape& input_shape, std::FILE* out) const {
  std::fputs(summary_string(input_shape).c_str(), out);
  std::fflush(out);
}

}  // namespace wick::keras
