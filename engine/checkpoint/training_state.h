// The training loop's position, saved in a checkpoint as training_state.json: the step, where the
// data loader is, and the random-number cursors, so that a resumed run draws the same numbers.
//
//   TrainingState state{.step = 100, .epoch = 2, .sample_cursor = 1536, .seed = 42,
//                       .rng = autograd::current_rng()};
//   save_training_state(dir / "training_state.json", state);   // returns its size and SHA-256
//   TrainingState back = load_training_state(dir / "training_state.json");   // equal to state
//
// The data-loader position is global (counted over all ranks), so it does not depend on the
// world size: a run resumed on M ranks re-partitions the rest of the epoch from sample_cursor.
// docs/checkpoints.md describes the JSON.
#pragma once

#include <cstdint>
#include <map>
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
  // Small named values other parts of the loop keep (loss-scaler scale, skipped-step counters, ...),
  // stored as strings: the owner formats and parses them.
  std::map<std::string, std::string> extra;

  bool operator==(const TrainingState& other) const;
};

// Writes the JSON (fsynced) and returns the file's size and SHA-256. Throws WickError (Data) naming
// the file on an I/O error.
FileDigest save_training_state(const std::string& path, const TrainingState& state);
// Reads it back. Throws WickError (Data) naming the file and the key when the file is missing,
// not JSON, or lacks a field or has one of the wrong type.
TrainingState load_training_state(const std::string& path);
// The same from the file's text (e.g. CheckpointFiles::text); `source` names it in errors.
TrainingState training_state_from_json(const std::string& text, const std::string& source);

}  // namespace wick
