#include "engine/train/train_log.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "engine/logging/image.h"
#include "engine/logging/plot.h"

namespace wick {
namespace {

constexpr double kEmaDecay = 0.95;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

RunLog::RunLog(const std::filesystem::path& run_dir, const RunLogOptions& options)
    : run_dir_(run_dir),
      options_(options),
      metrics_((run_dir / "metrics.jsonl").string()),
      tensorboard_(run_dir.string()),
      interactive_(::isatty(::fileno(stderr)) != 0),
      start_(std::chrono::steady_clock::now()),
      interval_start_(start_) {
  if (options_.first_step > 1) tensorboard_.mark_resumed(options_.first_step);
  for (const MetricsRecord& r : read_metrics(metrics_.path()))
    if (r.step < options_.first_step) history_[r.step] = r.loss;
  if (options_.progress) {
    const int64_t n = options_.total_steps - options_.first_step + 1;
    std::string label = options_.first_step > 1 ? "train (from step " + std::to_string(options_.first_step) + ")"
                                                : std::string("train");
    bar_ = std::make_unique<ProgressBar>(n, label);
  }
}

RunLog::~RunLog() = default;

void RunLog::step(const StepLog& entry) {
  if (std::isfinite(entry.loss)) {
    loss_ema_ = have_ema_ ? kEmaDecay * loss_ema_ + (1.0 - kEmaDecay) * entry.loss : entry.loss;
    have_ema_ = true;
  }
  interval_steps_ += 1;
  interval_samples_ += entry.samples;
  const bool last = entry.step == options_.total_steps;
  if (entry.step % options_.log_every == 0 || last) write_metrics(entry);

  if (!bar_) return;
  const int64_t done = entry.step - options_.first_step + 1;
  const double elapsed = seconds_since(start_);
  const double it_per_s = elapsed > 0 ? static_cast<double>(done) / elapsed : 0.0;
  const double samples_per_s = it_per_s * static_cast<double>(entry.samples);
  ProgressBar::Values values = {{"loss", loss_ema_}, {"it/s", it_per_s}, {"samples/s", samples_per_s},
                                {options_.memory_is_process_rss ? "rss_MB" : "mem_MB",
                                 static_cast<double>(entry.memory_bytes) / (1 << 20)}};
  if (entry.skipped_steps > 0) values.emplace_back("skipped", static_cast<double>(entry.skipped_steps));
  bar_->update(done, values);
  const int64_t total = options_.total_steps - options_.first_step + 1;
  const int64_t every = std::max<int64_t>(1, total / 20);
  if (!interactive_ && (done % every == 0 || last)) {
    const double eta = it_per_s > 0 ? static_cast<double>(total - done) / it_per_s : 0.0;
    std::fprintf(stderr, "wick train: step %lld/%lld loss %.4f (smoothed %.4f) %.2f it/s %.1f samples/s ETA %s %s %.0f MB\n",
                 static_cast<long long>(entry.step), static_cast<long long>(options_.total_steps), entry.loss, loss_ema_,
                 it_per_s, samples_per_s, format_duration(eta).c_str(),
                 options_.memory_is_process_rss ? "process peak RSS" : "mem",
                 static_cast<double>(entry.memory_bytes) / (1 << 20));
    std::fflush(stderr);
  }
}

void RunLog::write_metrics(const StepLog& entry) {
  const double interval = seconds_since(interval_start_);
  MetricsRecord record;
  record.step = entry.step;
  record.loss = entry.loss;
  record.lr = entry.lr;
  record.grad_norm = entry.grad_norm;
  if (interval > 0) {
    record.samples_per_s = static_cast<double>(interval_samples_) / interval;
    record.it_per_s = static_cast<double>(interval_steps_) / interval;
  }
  record.memory_bytes = entry.memory_bytes;
  record.elapsed_s = seconds_since(start_);
  if (have_ema_) record.extra.emplace_back("loss_ema", loss_ema_);
  record.extra.emplace_back("skipped_steps", static_cast<double>(entry.skipped_steps));
  if (entry.loss_scale) record.extra.emplace_back("loss_scale", *entry.loss_scale);
  metrics_.write(record);

  std::vector<std::pair<std::string, double>> scalars = {{"train/loss", entry.loss}, {"train/lr", entry.lr}};
  if (have_ema_) scalars.emplace_back("train/loss_ema", loss_ema_);
  if (entry.grad_norm) scalars.emplace_back("train/grad_norm", *entry.grad_norm);
  if (record.samples_per_s) scalars.emplace_back("train/samples_per_s", *record.samples_per_s);
  if (record.it_per_s) scalars.emplace_back("train/it_per_s", *record.it_per_s);
  scalars.emplace_back("train/memory_bytes", static_cast<double>(entry.memory_bytes));
  if (entry.loss_scale) scalars.emplace_back("train/loss_scale", *entry.loss_scale);
  if (!std::isfinite(entry.loss)) scalars.erase(scalars.begin());  // TensorBoard has no null
  tensorboard_.add_scalars(entry.step, scalars);

  history_[entry.step] = entry.loss;  // a step logged again after a resume replaces the earlier value
  std::vector<int64_t> steps;
  std::vector<double> losses;
  for (const auto& [step, loss] : history_) {
    steps.push_back(step);
    losses.push_back(loss);
  }
  save_loss_curve((run_dir_ / "loss.png").string(), steps, losses);

  interval_start_ = std::chrono::steady_clock::now();
  interval_steps_ = 0;
  interval_samples_ = 0;
}

void RunLog::image(const std::string& tag, const Image& image, int64_t step) {
  tensorboard_.add_image(tag, image, step);
}

void RunLog::finish() {
  if (bar_) bar_->finish();
}

}  // namespace wick
