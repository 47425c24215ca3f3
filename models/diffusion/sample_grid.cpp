#include "models/diffusion/sample_grid.h"

#include <algorithm>

#include "engine/logging/image.h"
#include "engine/train/train_log.h"
#include "models/diffusion/generate.h"
#include "models/registry.h"
#include "runtime/ops/creation.h"

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

void check_sampling(const TrainConfig& config, const TrainingData& data) {
  if (config.sample.every <= 0) return;
  const std::string reason = find_architecture(config.model.arch).sampling_unavailable(data.dataset->attributes().model_family);
  WICK_CHECK_KIND(Config, reason.empty(), "sample.every is ", config.sample.every, " but ", reason,
                  " (set sample.every: 0; training is not affected)");
  WICK_CHECK_KIND(Config, config.sample.n_per_class == 0 || !data.class_names.empty(), "sample.n_per_class: ",
                  data.dataset->path(), " has no labels, so there are no classes to sample (use sample.prompts)");
  try {
    dataset_text_encoder(*data.dataset);
    latents_to_images(zeros({1, data.dataset->attributes().latent_channels, 2, 2}), data.dataset->attributes());
  } catch (const WickError& error) {
    WICK_FAIL(Config, "sample.every is ", config.sample.every, " but sample grids cannot be made for ",
              data.dataset->path(), ": ", error.what(), " (set sample.every: 0)");
  }
}

fs::path write_sample_grid(DiffusionModel& model, const TrainConfig& config, const TrainingData& data,
                           const fs::path& run_dir, int64_t step, RunLog* log) {
  SampleLayout layout = sample_layout(config.sample, data.class_names);
  HashedTextEncoder encoder = dataset_text_encoder(*data.dataset);
  Tensor latents = generate_latents(model, config, encoder, layout.captions, sample_latent_shape(*data.dataset),
                                    config.sample.steps, config.sample.guidance,
                                    static_cast<uint64_t>(config.sample.seed));
  Tensor images = latents_to_images(latents, data.dataset->attributes());
  std::vector<std::string> labels(layout.captions.size());
  for (size_t i = 0; i < labels.size(); ++i)
    if (static_cast<int64_t>(i) % layout.n_columns == 0 || i >= labels.size() - config.sample.prompts.size())
      labels[i] = layout.captions[i];
  Image grid = make_image_grid(images, {.n_columns = layout.n_columns, .scale = 2, .value_min = 0.0f,
                                        .value_max = 1.0f, .labels = labels});
  fs::path path = run_dir / "samples" / ("step_" + std::to_string(step) + ".png");
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  save_png(grid, path.string());
  if (log) log->image("samples", grid, step);
  return path;
}

}  // namespace wick
