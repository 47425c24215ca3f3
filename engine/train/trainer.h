// `wick train`: the diffusion training loop, from a resolved config to checkpoints, metrics, sample
// grids and a LoRA file (docs/training.md).
//
//   TrainConfig config = parse_config_file("configs/quickstart.yaml", {"train.steps=200"});
//   TrainResult r = train(config, {.resume = "auto"});
//   // r.run_dir = output/quickstart: config.yaml, checkpoints/, metrics.jsonl, events.out.tfevents.*,
//   // loss.png, samples/step_<N>.png, lora/<name>.safetensors (network lora|dora)
//
// Everything the run needs is checked before the first step and before anything in the run
// directory is written or replaced (dataset present, valid and finite; model shapes against the data
// and the base weights; the output directory writable; a fresh run refusing a directory with
// checkpoints): a WickError of kind Config (exit status 2) or Data (3). A non-finite loss skips the
// step (no update), is counted and logged; max_nonfinite_steps in a row end the run with a Training
// error (status 4), leaving the last checkpoint as it was. Resuming (auto or a checkpoint directory)
// continues bitwise: the same losses as an uninterrupted run at the same world size.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "engine/config/train_config.h"

namespace wick {

struct TrainOptions {
  std::string resume = "auto";  // auto | none | a checkpoint directory (docs/checkpoints.md)
  bool progress = true;         // rank 0 draws a progress bar on stderr
  // End this process after this step (0 = run to train.steps), after writing a checkpoint there:
  // a time-sliced job continues with --resume auto. Never past train.steps.
  int64_t stop_after_step = 0;
};

struct TrainResult {
  std::filesystem::path run_dir;           // <output_dir>/<name>
  int64_t first_step = 1;                  // the first step this call ran (checkpoint step + 1 on resume)
  int64_t last_step = 0;                   // the last step this call finished
  std::vector<double> losses;              // per step this call ran; NaN for a skipped (non-finite) step
  int64_t skipped_steps = 0;               // over the whole run (resumes included)
  std::optional<std::filesystem::path> resumed_from;
  std::optional<std::filesystem::path> last_checkpoint;
  std::optional<std::filesystem::path> lora_file;   // network lora | dora
  std::optional<std::filesystem::path> model_file;  // network full: model/<name>.safetensors in save.dtype
  std::vector<std::filesystem::path> sample_grids;
  int world_size = 1;
  int rank = 0;
};

// Runs the training `config` describes on this process's rank (the process group comes from the
// launcher's environment and config.distributed). Rank 0 writes the logs; every rank writes its
// optimizer shard into checkpoints.
TrainResult train(const TrainConfig& config, const TrainOptions& options = {});

// <output_dir>/<name>
std::filesystem::path run_directory(const TrainConfig& config);

}  // namespace wick
