// `wick train`: the diffusion recipe on the generic step loop — from a resolved config to
// checkpoints, metrics, sample grids and a LoRA (or full model) file (docs/training.md).
//
//   TrainConfig config = parse_config_file("configs/quickstart.yaml", config_schema(), {"train.steps=200"});
//   TrainResult r = train(config, {.resume = "auto"});
//   // r.run_dir = output/quickstart: config.yaml, checkpoints/, metrics.jsonl, events.out.tfevents.*,
//   // loss.png, samples/step_<N>.png, lora/<name>.safetensors (network lora|dora)
//
// Everything the run needs is checked before the first step and before anything in the run
// directory is written or replaced (dataset present, valid and finite; model shapes against the data
// and the base weights; the output directory writable; a fresh run refusing a directory with
// checkpoints): a WickError of kind Config (exit status 2) or Data (3). engine/train/step_loop.h
// runs the steps: non-finite losses, resume, several ranks.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "engine/config/train_config.h"
#include "engine/train/step_loop.h"

namespace wick {

using TrainOptions = StepLoopOptions;

struct TrainResult : LoopResult {
  std::optional<std::filesystem::path> lora_file;   // network lora | dora
  std::optional<std::filesystem::path> model_file;  // network full: model/<name>.safetensors in save.dtype
  std::vector<std::filesystem::path> sample_grids;
  std::string resolved_config;  // options.dry_run: the config as the run would use it (memory plan applied), YAML
};

// Runs the training `config` describes on this process's rank (the process group comes from the
// launcher's environment and config.distributed). Rank 0 writes the logs; every rank writes its
// optimizer shard into checkpoints.
TrainResult train(const TrainConfig& config, const TrainOptions& options = {});

// <output_dir>/<name>
std::filesystem::path run_directory(const TrainConfig& config);

}  // namespace wick
