#include "models/diffusion/sample_grid.h"

#include <algorithm>

#include "engine/logging/image.h"
#include "engine/train/train_log.h"
#include "models/registry.h"

namespace fs = std::filesystem;

namespace wick {

SampleLayout sample_layout(const SampleConfig& sample, const std::vector<std::string>& class_names) {
  SampleLayout layout;
  if (sample.n_per_class > 0)
    for (const std::string& name : class_names)
      for (int64_t i = 0; i < sample.n_per_class; ++i) layout.captions.push_back(name);
  layout.captions.insert(layout.captions.end(), sample.prompts.begin(), sample.prompts.end());
  layout.n_columns = sample.n_per_class > 0
                         ? sample.n_per_class
                         : std::clamp<int64_t>(static_cast<int64_t>(sample.prompts.size()), 1, 8);
  return layout;
}

std::unique_ptr<ImageSampler> prepare_sampling(const TrainConfig& config, const TrainingData& data, Device device) {
  if (config.sample.every <= 0) return nullptr;
  WICK_CHECK_KIND(Config, config.sample.n_per_class == 0 || !data.class_names.empty(), "sample.n_per_class: ",
                  data.dataset->path(), " has no labels, so there are no classes to sample (use sample.prompts)");
  try {
    return find_architecture(config.model.arch)
        .make_sampler({.config = config, .dataset = *data.dataset, .device = device});
  } catch (const WickError& error) {
    if (error.kind() != ErrorKind::Config) throw;
    WICK_FAIL(Config, "sample.every is ", config.sample.every, ", and sample images cannot be made: ",
              message_of(error), " (or set sample.every: 0 to train without sample grids)");
  }
}

int64_t grid_scale(int64_t width) { return width < 128 ? 2 : 1; }

fs::path write_sample_grid(DiffusionModel& model, ImageSampler& sampler, const TrainConfig& config,
                           const TrainingData& data, const fs::path& run_dir, int64_t step, RunLog* log, bool write) {
  SampleLayout layout = sample_layout(config.sample, data.class_names);
  Tensor images = sampler.generate(model, layout.captions, sample_settings(config.sample));
  if (!write) return {};
  std::vector<std::string> labels(layout.captions.size());
  for (size_t i = 0; i < labels.size(); ++i)
    if (static_cast<int64_t>(i) % layout.n_columns == 0 || i >= labels.size() - config.sample.prompts.size())
      labels[i] = layout.captions[i];
  const int64_t width = images.size(3);
  Image grid = make_image_grid(images, {.n_columns = layout.n_columns, .scale = grid_scale(width), .value_min = 0.0f,
                                        .value_max = 1.0f, .labels = labels, .label_scale = width >= 512 ? 2 : 1});
  fs::path path = run_dir / "samples" / ("step_" + std::to_string(step) + ".png");
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  save_png(grid, path.string());
  if (log) log->image("samples", grid, step);
  return path;
}

}  // namespace wick
