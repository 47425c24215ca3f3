// What rank 0 of `wick train` reports: metrics.jsonl, TensorBoard scalars and images, loss.png and the
// progress display (docs/outputs.md).
//
//   RunLog log(run_dir, {.total_steps = 1500, .first_step = 1, .log_every = 10, .progress = true});
//   log.step({.step = s, .loss = l, .lr = lr, .grad_norm = g, .samples = 64, .memory_bytes = m});
//   log.image("samples", grid, s);
//   log.finish();
//
// Metrics are written every log_every steps and at the last step: the step's loss (null when it was
// skipped), lr, grad_norm, samples/s and it/s over the interval, peak memory, elapsed time, and the
// extras loss_ema, skipped_steps (and loss_scale with fp16). loss.png is redrawn at each write from the
// earlier lines of metrics.jsonl plus this run's. On a terminal the progress bar shows step/total, the
// smoothed loss, it/s, samples/s, ETA and memory; elsewhere a plain line is printed every 5% of the steps.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "engine/logging/metrics_log.h"
#include "engine/logging/tensorboard.h"
#include "engine/progress.h"

namespace wick {

struct Image;

struct RunLogOptions {
  int64_t total_steps = 0;
  int64_t first_step = 1;   // > 1 after a resume (TensorBoard is told, the display counts from here)
  int64_t log_every = 10;
  bool progress = true;
  // What StepLog::memory_bytes measures, for the labels: on a GPU the tensors' peak (what the memory plan
  // estimates); on the CPU the process's peak resident set (libraries, the mapped weights and the dataset too).
  bool memory_is_process_rss = false;
};

struct StepLog {
  int64_t step = 0;
  double loss = 0.0;                     // NaN for a skipped step
  double lr = 0.0;
  std::optional<double> grad_norm;
  int64_t samples = 0;                   // samples in the step over all ranks
  int64_t memory_bytes = 0;
  int64_t skipped_steps = 0;             // so far in the run
  std::optional<double> loss_scale;      // fp16
};

class RunLog {
 public:
  RunLog(const std::filesystem::path& run_dir, const RunLogOptions& options);
  ~RunLog();
  RunLog(const RunLog&) = delete;
  RunLog& operator=(const RunLog&) = delete;

  void step(const StepLog& entry);
  void image(const std::string& tag, const Image& image, int64_t step);
  // Ends the progress display with a final line.
  void finish();
  double loss_ema() const { return loss_ema_; }

 private:
  void write_metrics(const StepLog& entry);

  std::filesystem::path run_dir_;
  RunLogOptions options_;
  MetricsLog metrics_;
  TensorBoardWriter tensorboard_;
  std::unique_ptr<ProgressBar> bar_;
  bool interactive_ = false;
  double loss_ema_ = 0.0;
  bool have_ema_ = false;
  std::chrono::steady_clock::time_point start_, interval_start_;
  int64_t interval_steps_ = 0, interval_samples_ = 0;
  std::map<int64_t, double> history_;  // step -> loss, for loss.png
};

}  // namespace wick
