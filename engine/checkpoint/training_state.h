// The training loop's position, saved in a checkpoint as training_state.json: the step, where the
// data loader is, the random-number cursors (so that a resumed run draws the same numbers) and the
// loop's counters, all typed.
//
//   TrainingState state{.step = 100, .epoch = 2, .sample_cursor = 1536, .seed = 42,
//                       .rng = autograd::current_rng(), .global_batch = 64};
//   save_training_state(dir / "training_state.json", state);   // returns its size and SHA-256
//   TrainingState back = load_training_state(dir / "training_state.json");   // equal to state
//
// The data-loader position is global (counted over all ranks), so it does not depend on the
// world size: a run resumed on M ranks re-partitions the rest of the epoch from sample_cursor.
// docs/checkpoints.md describes the JSON.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "engine/autograd/rng_state.h"
#include "engine/checkpoint/sha256.h"

namespace wick {

struct TrainingState {
  int64_t step = 0;           // optimizer steps taken (the checkpoint's step)
  int64_t epoch = 0;          // current epoch (0-based)
  int64_t sample_cursor = 0;  // samples of this epoch already consumed, over all ranks
  uint64_t seed = 0;          // the run's seed (shuffles and Philox keys derive from it)
  autograd::RngCursor rng;    // the engine's implicit cursor (dropout) at the save
  int64_t global_batch = 0;   // samples per micro-step over all ranks (0: not recorded)
  int64_t reg_batch = 0;      // of them, regularization samples (0: none, or not recorded)
  int64_t skipped_steps = 0;  // steps skipped for a non-finite loss, over the whole run
  int64_t nonfinite_in_a_row = 0;
  // The fp16 loss scaler (engine/optim/loss_scaler.h), when the run has one.
  struct LossScale {
    double scale = 0.0;
    int64_t growth_tracker = 0;
    int64_t n_skipped = 0;
    bool operator==(const LossScale&) const = default;
  };
  std::optional<LossScale> loss_scale;

  bool operator==(const TrainingState& other) const;
};

// Writes the JSON (through a temporary, fsynced, renamed: write_file_atomically) and returns the
// file's size and SHA-256. Throws WickError (Data) naming
// the file on an I/O error.
FileDigest save_training_state(const std::string& path, const TrainingState& state);
// Reads it back (format_version 2, and version 1 whose counters were strings in "extra"). Throws
// WickError (Data) naming the file and the key when the file is missing, not JSON, or lacks a field
// or has one of the wrong type.
TrainingState load_training_state(const std::string& path);
// The same from the file's text (e.g. CheckpointFiles::text); `source` names it in errors.
TrainingState training_state_from_json(const std::string& text, const std::string& source);

}  // namespace wick
