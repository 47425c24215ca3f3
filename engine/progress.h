// A terminal progress bar for long loops (training epochs, dataset packing, sampling).
//
//   ProgressBar bar(n_steps, "epoch 1/10");
//   for (...) { ...; bar.update(step + 1, {{"loss", loss}, {"accuracy", acc}}); }
//   bar.finish({{"val_loss", v}});
//
// On a terminal the line is redrawn in place at most 10 times a second; otherwise (a log file, CI)
// only the final line is printed, so logs stay readable. Shows count/total, a bar, elapsed time,
// time per step, ETA and the named values.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace wick {

class ProgressBar {
 public:
  using Values = std::vector<std::pair<std::string, double>>;

  ProgressBar(int64_t total, std::string label, std::FILE* out = stderr);
  void update(int64_t done, const Values& values = {});
  // Prints the final line (with `values` appended to the last update's) and a newline.
  void finish(const Values& values = {});
  double elapsed_seconds() const;

 private:
  std::string render(int64_t done, const Values& values) const;

  int64_t total_;
  std::string label_;
  std::FILE* out_;
  bool interactive_;
  bool finished_ = false;
  int64_t last_done_ = 0;
  Values last_values_;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

// "1m 23s", "4.2s", "350ms"
std::string format_duration(double seconds);

}  // namespace wick
