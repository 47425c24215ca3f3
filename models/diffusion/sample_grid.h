// The sample grid `wick train` writes every sample.every steps: samples/step_<N>.png in the run
// directory and the same image in TensorBoard (tag "samples").
//
//   auto sampler = prepare_sampling(config, data, device);     // before the first step; null when every == 0
//   fs::path png = write_sample_grid(*model, *sampler, config, data, run_dir, step, &log);
//
// Cells: with sample.n_per_class > 0, one row per class of the dataset (/label_names) with that many
// images, the class name as caption; then one cell per sample.prompts entry. Images come from the
// architecture's ImageSampler (models/image_sampler.h) with sample.steps, sample.guidance, sample.seed
// and sample.width / height, so the grids of one run differ only by the weights. Each row's first cell
// carries its caption, and so does every prompt's cell.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/config/train_config.h"
#include "engine/train/train_setup.h"
#include "models/architecture.h"

namespace wick {

class RunLog;

// The captions of the grid's cells, row by row, and the number of columns.
struct SampleLayout {
  std::vector<std::string> captions;
  int64_t n_columns = 1;
};
SampleLayout sample_layout(const SampleConfig& sample, const std::vector<std::string>& class_names);

// The architecture's sampler on `device` when sample.every > 0 (nullptr otherwise), made before training
// starts so that a grid that cannot be made is a Config error then: an architecture that cannot sample
// this dataset, a VAE or text encoder that is not given or not there, no class names for n_per_class.
std::unique_ptr<ImageSampler> prepare_sampling(const TrainConfig& config, const TrainingData& data, Device device);

// Pixels per image pixel in a grid of images `width` pixels wide: 2 below 128 pixels (the quickstart's
// 28), else 1.
int64_t grid_scale(int64_t width);

// Generates the grid for `step` with `sampler`, writes <run_dir>/samples/step_<N>.png (through a temporary
// file and a rename) and, when `log` is given, the TensorBoard image. Returns the PNG's path. write false:
// only generates (a rank taking part in the collectives of a sharded model's grid) and returns an empty path.
std::filesystem::path write_sample_grid(DiffusionModel& model, ImageSampler& sampler, const TrainConfig& config,
                                        const TrainingData& data, const std::filesystem::path& run_dir, int64_t step,
                                        RunLog* log, bool write = true);

}  // namespace wick
