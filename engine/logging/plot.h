// The loss curve (loss.png): raw loss as light points joined by a thin line, an EMA-smoothed line on
// top, step on x, loss on y (linear or log), tick labels in the built-in font.
//
//   std::vector<MetricsRecord> history = read_metrics(run_dir + "/metrics.jsonl");
//   save_loss_curve(run_dir + "/loss.png", steps, losses, {.log_scale = true});
//
// Non-finite losses (skipped steps), and non-positive ones on a log axis, are left out. With no data
// the axes are drawn with "no data". Drawing is plain Bresenham lines on an RGB Image.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/logging/image.h"

namespace wick {

struct LossCurveOptions {
  int64_t width = 720, height = 440;   // pixels
  bool log_scale = false;               // log10 y axis
  // smoothed = decay * smoothed + (1 - decay) * loss; a negative value picks 1 - 1 / max(5, n / 50)
  // for n points, so the curve looks equally smooth for short and long runs.
  double ema_decay = -1.0;
  std::string title = "training loss";
  int64_t font_scale = 1;
};

struct LossCurvePlot {
  Image image;                                                 // RGB
  int64_t plot_left = 0, plot_top = 0, plot_right = 0, plot_bottom = 0;  // the axes' box, inclusive
};

// steps and losses have the same length (steps need not be sorted: they are sorted here).
LossCurvePlot plot_loss_curve(const std::vector<int64_t>& steps, const std::vector<double>& losses,
                              const LossCurveOptions& options = {});
// plot_loss_curve + save_png (through a temporary file and a rename).
void save_loss_curve(const std::string& path, const std::vector<int64_t>& steps, const std::vector<double>& losses,
                     const LossCurveOptions& options = {});

// About `target_count` round tick values (1, 2 or 5 times a power of ten apart) inside [low, high].
std::vector<double> nice_ticks(double low, double high, int64_t target_count);
// Bresenham line from (x0, y0) to (x1, y1), each point a thickness x thickness square; clipped.
void draw_line(Image& image, int64_t x0, int64_t y0, int64_t x1, int64_t y1, Rgb color, int64_t thickness = 1);
// A short tick label: "0.05", "1.2e-05", "12000", "1.5e+06".
std::string format_tick(double value);

}  // namespace wick
