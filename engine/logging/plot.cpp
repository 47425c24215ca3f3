#include "engine/logging/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "runtime/error.h"

namespace wick {
namespace {

constexpr Rgb kBackground = {255, 255, 255};
constexpr Rgb kAxis = {40, 40, 40};
constexpr Rgb kGrid = {228, 228, 228};
constexpr Rgb kText = {30, 30, 30};
constexpr Rgb kRawLine = {186, 209, 235};
constexpr Rgb kRawPoint = {140, 178, 222};
constexpr Rgb kSmoothed = {214, 96, 29};

// Tick values for a log10 axis spanning [low, high] (in log10 units): powers of ten, or 1-2-5 steps
// when the range covers less than about two decades.
std::vector<double> log_ticks(double low, double high) {
  std::vector<double> ticks;  // in log10 units
  for (double power = std::ceil(low); power <= high; power += 1.0) ticks.push_back(power);
  if (ticks.size() >= 3) {
    while (ticks.size() > 8) {  // thin out: every second power
      std::vector<double> thinned;
      for (size_t i = 0; i < ticks.size(); i += 2) thinned.push_back(ticks[i]);
      ticks = thinned;
    }
    return ticks;
  }
  ticks.clear();
  for (double power = std::floor(low); power <= std::ceil(high); power += 1.0)
    for (double mantissa : {1.0, 2.0, 5.0}) {
      const double tick = power + std::log10(mantissa);
      if (tick >= low - 1e-12 && tick <= high + 1e-12) ticks.push_back(tick);
    }
  if (ticks.size() >= 2) return ticks;
  for (double value : nice_ticks(std::pow(10.0, low), std::pow(10.0, high), 4))
    if (value > 0) ticks.push_back(std::log10(value));
  return ticks;
}

}  // namespace

std::vector<double> nice_ticks(double low, double high, int64_t target_count) {
  std::vector<double> ticks;
  if (!(high > low) || !std::isfinite(low) || !std::isfinite(high) || target_count < 1) return ticks;
  const double rough = (high - low) / static_cast<double>(target_count);
  const double power = std::pow(10.0, std::floor(std::log10(rough)));
  double spacing = power * 10.0;
  for (double mantissa : {1.0, 2.0, 5.0})
    if (rough <= mantissa * power) {
      spacing = mantissa * power;
      break;
    }
  for (double tick = std::ceil(low / spacing - 1e-9) * spacing; tick <= high + spacing * 1e-9; tick += spacing)
    ticks.push_back(std::abs(tick) < spacing * 1e-9 ? 0.0 : tick);
  return ticks;
}

std::string format_tick(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3g", value);
  return text;
}

void draw_line(Image& image, int64_t x0, int64_t y0, int64_t x1, int64_t y1, Rgb color, int64_t thickness) {
  const int64_t dx = std::abs(x1 - x0), dy = -std::abs(y1 - y0);
  const int64_t step_x = x0 < x1 ? 1 : -1, step_y = y0 < y1 ? 1 : -1;
  const int64_t offset = (thickness - 1) / 2;
  int64_t error = dx + dy;
  for (;;) {
    image.fill_rect(y0 - offset, x0 - offset, thickness, thickness, color);
    if (x0 == x1 && y0 == y1) break;
    const int64_t twice = 2 * error;
    if (twice >= dy) error += dy, x0 += step_x;
    if (twice <= dx) error += dx, y0 += step_y;
  }
}

LossCurvePlot plot_loss_curve(const std::vector<int64_t>& steps, const std::vector<double>& losses,
                              const LossCurveOptions& options) {
  WICK_CHECK(steps.size() == losses.size(), "plot_loss_curve: ", steps.size(), " steps but ", losses.size(),
             " losses");
  WICK_CHECK(options.width >= 120 && options.height >= 80 && options.font_scale >= 1,
             "plot_loss_curve: the image must be at least 120x80 and font_scale >= 1 (got ", options.width, "x",
             options.height, ", ", options.font_scale, ")");
  WICK_CHECK(options.ema_decay < 1.0, "plot_loss_curve: ema_decay must be below 1 (negative: automatic), got ",
             options.ema_decay);

  // Points kept, sorted by step; y in axis units (log10 when log_scale).
  std::vector<size_t> order(steps.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return steps[a] < steps[b]; });
  size_t n_points = 0;
  for (size_t index : order)
    n_points += std::isfinite(losses[index]) && !(options.log_scale && losses[index] <= 0.0);
  const double decay = options.ema_decay >= 0.0
                           ? options.ema_decay
                           : 1.0 - 1.0 / std::max(5.0, static_cast<double>(n_points) / 50.0);
  std::vector<double> xs, ys, smoothed;
  for (size_t index : order) {
    const double loss = losses[index];
    if (!std::isfinite(loss) || (options.log_scale && loss <= 0.0)) continue;
    xs.push_back(static_cast<double>(steps[index]));
    ys.push_back(options.log_scale ? std::log10(loss) : loss);
    // EMA on the loss itself (then mapped to the axis), starting from the first value.
    const double previous = smoothed.empty() ? loss : smoothed.back();
    smoothed.push_back(smoothed.empty() ? loss : decay * previous + (1.0 - decay) * loss);
  }
  const bool has_data = !xs.empty();

  double x_low = has_data ? xs.front() : 0.0, x_high = has_data ? xs.back() : 1.0;
  if (x_high <= x_low) x_high = x_low + 1.0;
  double y_low = has_data ? *std::min_element(ys.begin(), ys.end()) : 0.0;
  double y_high = has_data ? *std::max_element(ys.begin(), ys.end()) : 1.0;
  if (y_high - y_low < 1e-12) y_low -= 0.5, y_high += 0.5;
  const double y_margin = 0.05 * (y_high - y_low);
  y_low -= y_margin, y_high += y_margin;
  if (!options.log_scale && y_low < 0.0 && (!has_data || *std::min_element(ys.begin(), ys.end()) >= 0.0))
    y_low = 0.0;

  const std::vector<double> x_ticks = nice_ticks(x_low, x_high, 6);
  const std::vector<double> y_ticks = options.log_scale ? log_ticks(y_low, y_high) : nice_ticks(y_low, y_high, 6);
  auto y_tick_label = [&](double tick) { return format_tick(options.log_scale ? std::pow(10.0, tick) : tick); };

  const int64_t fs = options.font_scale, line = kLineHeight * fs;
  int64_t y_label_width = text_width("loss", fs);
  for (double tick : y_ticks) y_label_width = std::max(y_label_width, text_width(y_tick_label(tick), fs));

  LossCurvePlot plot;
  plot.plot_left = y_label_width + 10 * fs;
  plot.plot_top = 2 * line + 8 * fs;
  plot.plot_right = options.width - 12 * fs - text_width("0", fs) * 3;  // room for the last x label
  plot.plot_bottom = options.height - 2 * line - 10 * fs;
  Image& image = plot.image;
  image = Image(options.height, options.width, 3, kBackground);
  const int64_t left = plot.plot_left, top = plot.plot_top, right = plot.plot_right, bottom = plot.plot_bottom;

  auto to_px = [&](double x) {
    return left + static_cast<int64_t>(std::lround((x - x_low) / (x_high - x_low) * static_cast<double>(right - left)));
  };
  auto to_py = [&](double y) {
    return bottom -
           static_cast<int64_t>(std::lround((y - y_low) / (y_high - y_low) * static_cast<double>(bottom - top)));
  };

  // Grid, ticks and their labels.
  for (double tick : x_ticks) {
    const int64_t px = to_px(tick);
    draw_line(image, px, top, px, bottom, kGrid);
    draw_line(image, px, bottom, px, bottom + 4 * fs, kAxis);
    const std::string label = format_tick(tick);
    draw_text(image, px - text_width(label, fs) / 2, bottom + 7 * fs, label, kText, fs);
  }
  for (double tick : y_ticks) {
    const int64_t py = to_py(tick);
    draw_line(image, left, py, right, py, kGrid);
    draw_line(image, left - 4 * fs, py, left, py, kAxis);
    const std::string label = y_tick_label(tick);
    draw_text(image, left - 7 * fs - text_width(label, fs), py - (kGlyphHeight * fs) / 2, label, kText, fs);
  }

  // Raw loss: a thin light line with points; then the smoothed line on top.
  for (size_t i = 1; i < xs.size(); ++i)
    draw_line(image, to_px(xs[i - 1]), to_py(ys[i - 1]), to_px(xs[i]), to_py(ys[i]), kRawLine);
  const int64_t point = xs.size() > 400 ? 1 : 2;
  for (size_t i = 0; i < xs.size(); ++i) image.fill_rect(to_py(ys[i]) - point / 2, to_px(xs[i]) - point / 2, point, point, kRawPoint);
  auto smoothed_y = [&](size_t i) { return options.log_scale ? std::log10(smoothed[i]) : smoothed[i]; };
  for (size_t i = 1; i < xs.size(); ++i)
    draw_line(image, to_px(xs[i - 1]), to_py(smoothed_y(i - 1)), to_px(xs[i]), to_py(smoothed_y(i)), kSmoothed,
              2 * fs);
  if (xs.size() == 1) image.fill_rect(to_py(smoothed_y(0)) - 1, to_px(xs[0]) - 1, 3, 3, kSmoothed);

  // Axes box (drawn last so the curves never cover it), titles and legend.
  draw_line(image, left, top, right, top, kAxis);
  draw_line(image, left, bottom, right, bottom, kAxis);
  draw_line(image, left, top, left, bottom, kAxis);
  draw_line(image, right, top, right, bottom, kAxis);
  draw_text(image, (options.width - text_width(options.title, fs * 2)) / 2, 4 * fs, options.title, kText, fs * 2);
  draw_text(image, left - text_width("loss", fs) - 7 * fs, top - line - 2 * fs, "loss", kText, fs);
  draw_text(image, (left + right - text_width("step", fs)) / 2, options.height - line - 2 * fs, "step", kText, fs);
  if (!has_data) draw_text(image, (left + right - text_width("no data", fs * 2)) / 2, (top + bottom) / 2, "no data", kText, fs * 2);

  char ema_label[32];
  std::snprintf(ema_label, sizeof(ema_label), "EMA %.3g", decay);
  const int64_t legend_x = right - text_width(ema_label, fs) - 30 * fs, legend_y = top - line - 2 * fs;
  draw_line(image, legend_x - 90 * fs, legend_y + 3 * fs, legend_x - 76 * fs, legend_y + 3 * fs, kRawLine, fs);
  image.fill_rect(legend_y + 2 * fs, legend_x - 84 * fs, 2 * fs, 2 * fs, kRawPoint);
  draw_text(image, legend_x - 72 * fs, legend_y, "loss", kText, fs);
  draw_line(image, legend_x - 18 * fs, legend_y + 3 * fs, legend_x - 4 * fs, legend_y + 3 * fs, kSmoothed, 2 * fs);
  draw_text(image, legend_x, legend_y, ema_label, kText, fs);
  return plot;
}

void save_loss_curve(const std::string& path, const std::vector<int64_t>& steps, const std::vector<double>& losses,
                     const LossCurveOptions& options) {
  save_png(plot_loss_curve(steps, losses, options).image, path);
}

}  // namespace wick
