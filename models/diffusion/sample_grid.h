// The sample grid `wick train` writes every sample.every steps: samples/step_<N>.png in the run
// directory and the same image in TensorBoard (tag "samples").
//
//   check_sampling(config, *data.dataset);                      // before the first step
//   fs::path png = write_sample_grid(*model, config, data, run_dir, step, &log);
//
// Cells: with sample.n_per_class > 0, one row per class of the dataset (/label_names) with that many
// images, the class name as caption; then one cell per sample.prompts entry. Images come from
// generate_latents (models/diffusion/generate.h) with sample.steps, sample.guidance and sample.seed, so
// the grids of one run differ only by the weights. Each row's first cell carries its caption.
#pragma once

#include <cstdint>
#include <filesystem>
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

// Config errors, before training starts, when sample.every > 0 but the grid cannot be made: an
// architecture that cannot sample yet, no class names for n_per_class, an embedding the sampler
// cannot re-create, latents wick cannot turn into pixels.
void check_sampling(const TrainConfig& config, const TrainingData& data);

// Generates the grid for `step`, writes <run_dir>/samples/step_<N>.png (through a temporary file and a
// rename) and, when `log` is given, the TensorBoard image. Returns the PNG's path.
std::filesystem::path write_sample_grid(DiffusionModel& model, const TrainConfig& config, const TrainingData& data,
                                        const std::filesystem::path& run_dir, int64_t step, RunLog* log);

}  // namespace wick
