#include "engine/progress.h"

#include <unistd.h>

#include <cmath>

namespace wick {

std::string format_duration(double seconds) {
  char text[32];
  if (seconds < 1.0)
    std::snprintf(text, sizeof(text), "%.0fms", seconds * 1000.0);
  else if (seconds < 60.0)
    std::snprintf(text, sizeof(text), "%.1fs", seconds);
  else if (seconds < 3600.0)
    std::snprintf(text, sizeof(text), "%dm %02ds", static_cast<int>(seconds) / 60, static_cast<int>(seconds) % 60);
  else
    std::snprintf(text, sizeof(text), "%dh %02dm", static_cast<int>(seconds) / 3600,
                  (static_cast<int>(seconds) % 3600) / 60);
  return text;
}

ProgressBar::ProgressBar(int64_t total, std::string label, std::FILE* out)
    : total_(total), label_(std::move(label)), out_(out), interactive_(isatty(fileno(out)) != 0) {
  start_ = last_draw_ = std::chrono::steady_clock::now();
}

double ProgressBar::elapsed_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::string ProgressBar::render(int64_t done, const Values& values) const {
  constexpr int width = 24;
  double fraction = total_ > 0 ? static_cast<double>(done) / static_cast<double>(total_) : 1.0;
  int filled = static_cast<int>(std::floor(fraction * width));
  std::string bar(static_cast<size_t>(filled), '=');
  if (filled < width) bar += done > 0 ? ">" : ".";
  bar.resize(width, '.');
  double elapsed = elapsed_seconds();
  double per_step = done > 0 ? elapsed / static_cast<double>(done) : 0.0;
  char head[160];
  std::snprintf(head, sizeof(head), "%s %lld/%lld [%s] %s", label_.c_str(), static_cast<long long>(done),
                static_cast<long long>(total_), bar.c_str(), format_duration(elapsed).c_str());
  std::string line = head;
  if (done > 0 && done < total_) {
    line.append(" (ETA ");
    line.append(format_duration(per_step * static_cast<double>(total_ - done)));
    line.append(")");
  }
  if (done > 0) {
    line.append(" ");
    line.append(format_duration(per_step));
    line.append("/step");
  }
  for (const auto& [name, value] : values) {
    char item[96];
    std::snprintf(item, sizeof(item), " - %s: %.4g", name.c_str(), value);
    line += item;
  }
  return line;
}

void ProgressBar::update(int64_t done, const Values& values) {
  last_done_ = done;
  last_values_ = values;
  if (!interactive_) return;
  auto now = std::chrono::steady_clock::now();
  if (done < total_ && std::chrono::duration<double>(now - last_draw_).count() < 0.1) return;
  last_draw_ = now;
  std::fprintf(out_, "\r%s\033[K", render(done, values).c_str());
  std::fflush(out_);
}

void ProgressBar::finish(const Values& values) {
  if (finished_) return;
  finished_ = true;
  Values all = last_values_;
  all.insert(all.end(), values.begin(), values.end());
  std::fprintf(out_, "%s%s%s\n", interactive_ ? "\r" : "", render(last_done_, all).c_str(), interactive_ ? "\033[K" : "");
  std::fflush(out_);
}

}  // namespace wick
