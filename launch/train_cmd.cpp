// `wick train CONFIG.yaml [--set key.path=value ...] [--resume auto|none|PATH] [--steps N]
// [--stop-after N] [--max-memory SIZE] [--no-progress] [--dry-run]` (docs/training.md).
//
// Exit status: 0 done; 2 bad config or command line; 3 bad data, weights or checkpoint; 4 a failure
// during training (non-finite losses, a lost rank); 75 stopped on request (SIGTERM or SIGUSR1, e.g.
// preemption, or Ctrl-C) after a step, with a checkpoint there: requeue and continue with --resume auto. Under
// mpirun a failing rank ends the whole job with its status (comm::exit_after_failure), so no rank
// waits forever for it.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "comm/launch_env.h"
#include "engine/config/train_config.h"
#include "engine/data/latent_dataset.h"
#include "engine/train/preemption.h"
#include "launch/commands.h"
#include "models/diffusion/train.h"
#include "models/registry.h"
#include "runtime/error.h"

namespace wick::launch {
namespace {

struct TrainArgs {
  std::string config;
  std::vector<std::string> sets;
  std::string resume = "auto";
  int64_t steps = 0;
  int64_t stop_after = 0;
  std::string max_memory;
  bool no_progress = false;
  bool dry_run = false;
};

// The trigger_word warning (train_config.h trigger_word_warning) is noise when every training dataset's captions were
// encoded with the word (`wick dataset encode --config` / --trigger-word record it): a note then. A dataset that
// records another word gets a warning naming both. Datasets that cannot be opened are left to the run to refuse.
void check_trigger_word(const TrainConfig& config, std::vector<std::string>& notes,
                        std::vector<std::string>& warnings) {
  if (config.trigger_word.empty()) return;
  std::vector<std::string> recorded;
  for (const DatasetConfig& dataset : config.datasets) {
    if (dataset.is_reg) continue;
    try {
      recorded.push_back(LatentDataset::open(dataset.path)->attributes().trigger_word);
    } catch (const WickError&) {
      return;
    }
  }
  const std::string warning = trigger_word_warning(config.trigger_word);
  auto generic = std::find_if(warnings.begin(), warnings.end(), [&](const std::string& w) {
    return w.size() >= warning.size() && w.compare(w.size() - warning.size(), warning.size(), warning) == 0;
  });
  if (generic == warnings.end()) return;
  std::vector<std::string> training;
  for (const DatasetConfig& dataset : config.datasets)
    if (!dataset.is_reg) training.push_back(dataset.path);
  for (size_t i = 0; i < recorded.size(); ++i) {
    if (recorded[i] == config.trigger_word) continue;
    if (recorded[i].empty()) return;  // not recorded: the generic warning stands
    *generic = "trigger_word '" + config.trigger_word + "' differs from '" + recorded[i] + "', the word the captions of " +
               training[i] + " were encoded with (wick dataset encode --trigger-word): training sees '" +
               recorded[i] + "'; sample prompts get '" + config.trigger_word + "'";
    return;
  }
  warnings.erase(generic);
  notes.push_back("trigger_word '" + config.trigger_word + "': the captions of " +
                  (training.size() == 1 ? training.front() : std::to_string(training.size()) + " datasets") +
                  " were encoded with it (wick dataset encode recorded the word)");
}

void run_train(const TrainArgs& args) {
  report_errors([&] {
    std::vector<std::string> overrides = args.sets;
    if (args.steps > 0) overrides.push_back("train.steps=" + std::to_string(args.steps));
    if (!args.max_memory.empty()) overrides.push_back("train.max_memory=" + args.max_memory);
    std::vector<std::string> notes, warnings;
    TrainConfig config = parse_config_file(args.config, config_schema(), overrides, &notes, &warnings);
    check_trigger_word(config, notes, warnings);
    // The config is the same on every rank, and so are its notes and warnings: rank 0 prints them, once per job.
    if (comm::detect_launch_env().rank == 0) {
      for (const std::string& note : notes) std::fprintf(stderr, "wick: note: %s\n", note.c_str());
      for (const std::string& warning : warnings) std::fprintf(stderr, "wick: warning: %s\n", warning.c_str());
    }
    const TrainResult result = train(config, {.resume = args.resume, .progress = !args.no_progress,
                                              .stop_after_step = args.stop_after, .dry_run = args.dry_run});
    if (args.dry_run) {
      if (comm::detect_launch_env().rank == 0) std::fputs(result.resolved_config.c_str(), stdout);  // once per job
      return;
    }
    if (result.preempted) {
      // Every rank, after the checkpoint: through MPI_Abort under a launcher, since Open MPI's mpirun
      // with orte_abort_on_non_zero_status 0 (docs/distributed.md) exits 0 when ranks exit non-zero.
      if (comm::mpi_initialized()) {
        std::signal(SIGTERM, SIG_IGN);  // mpirun's SIGTERM to the other ranks now is no failure to report
        comm::exit_after_failure(kExitPreempted);
      }
      set_exit_status(kExitPreempted);
    }
  });
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* cmd = app.add_subcommand("train", "Train a diffusion model or LoRA from a YAML config (docs/training.md)");
  cmd->add_option("config", args->config, "the run's YAML config (docs/config.md)")->required();
  cmd->add_option("--set", args->sets, "override a key: --set train.lr=3e-4 (repeatable)")->allow_extra_args(false);
  cmd->add_option("--resume", args->resume,
                  "auto: the newest valid checkpoint of the run (default); none: start fresh; or a checkpoint directory");
  cmd->add_option("--steps", args->steps, "train.steps (the same as --set train.steps=N)")->check(CLI::PositiveNumber);
  cmd->add_option("--stop-after", args->stop_after,
                  "end this process after step N with a checkpoint (continue later with --resume auto)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-memory", args->max_memory,
                  "the memory the run must fit in per rank, e.g. 24GB (train.max_memory): the memory plan chooses "
                  "checkpointing, float8 and blocks to swap where they are auto");
  cmd->add_flag("--no-progress", args->no_progress, "no progress display");
  cmd->add_flag("--dry-run", args->dry_run,
                "check the config, the dataset, the weights and the memory plan, print the resolved config, and exit "
                "without training or writing anything");
  cmd->callback([args] { run_train(*args); });
}

}  // namespace wick::launch
