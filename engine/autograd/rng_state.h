// The engine's implicit random-number cursor: where layers that draw random numbers without being
// handed a stream (dropout inside a block) take them from.
//
//   current_rng() = RngCursor{derive_stream(seed, step, rank, RngPurpose::StepDropout), 0};  // per step
//   set_sample_streams(per_sample_streams(seed, batch.ids, epoch, RngPurpose::Dropout));    // per micro-batch
//   Tensor y = autograd::dropout(h, 0.1, true);      // h [B, ...]: row b from sample b's stream
//   RngSpan c = take(x.numel());                     // a shared draw: elements [c.offset, c.offset + n)
//
//   RngCursor snapshot = current_rng();              // gradient checkpointing, before the forward
//   ... forward (draws, advancing the cursor) ...
//   { RngCursorGuard replay(snapshot); ... recompute: the same draws, the same numbers ... }
//   // leaving the guard restores the cursor to where it was before the replay
//
// Scheme: one cursor per thread (thread_local). It holds a shared Philox stream with an element
// offset and, optionally, one stream per sample of the current batch with one common per-sample
// offset. A draw for a tensor whose leading axis has as many rows as there are sample streams takes
// row b from sample b's stream, elements [sample_offset, sample_offset + numel / B), and advances
// sample_offset by numel / B: a sample's numbers then depend only on its own stream and on the
// sequence of draws, not on the batch it shares, the rank or the world size. Any other draw (no
// sample streams, or a leading axis of another size) takes [offset, offset + n) of the shared
// stream and advances offset by n. Draws never overlap within a stream. The training loop sets the
// cursor (docs/training.md "Randomness"). The default cursor is
// {derive_stream(0, 0, 0, RngPurpose::Dropout), 0} without sample streams. Offsets are in elements
// of a stream (as the offset argument of runtime/ops/random.h).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/philox.h"

namespace wick::autograd {

struct RngCursor {
  RngStream stream;                       // the shared stream
  uint64_t offset = 0;                    // elements of `stream` taken so far
  std::vector<RngStream> sample_streams;  // empty, or one per sample (row of the leading axis)
  uint64_t sample_offset = 0;             // elements of each sample stream taken so far
};

// Elements [offset, offset + n) of `stream` (n given by the caller).
struct RngSpan {
  RngStream stream;
  uint64_t offset = 0;
};

// This thread's cursor (assignable).
RngCursor& current_rng();
// A shared draw: returns {stream, offset} as they are, then advances the offset by n (n >= 0).
RngSpan take(int64_t n);
// Installs one stream per sample of the batch about to run, with sample_offset 0 (an empty list
// removes them); the shared stream and offset are left as they are.
void set_sample_streams(std::vector<RngStream> streams);
// derive_stream(seed, ids[b], epoch, purpose) for each b: the per-sample streams of a batch.
std::vector<RngStream> per_sample_streams(uint64_t seed, const std::vector<int64_t>& ids, uint64_t epoch,
                                          RngPurpose purpose);
// True when a draw for a tensor with leading size `rows` (rank >= 1) comes from the sample streams.
bool draws_per_sample(int64_t rows);
// A per-sample draw of `per_sample` elements from each sample stream (draws_per_sample must hold):
// returns the offset the draw starts at and advances sample_offset by per_sample (>= 0).
uint64_t take_per_sample(int64_t per_sample);

// Saves the cursor on construction and restores it on destruction; the second form also installs
// `replacement` for the guard's lifetime (replaying a snapshot).
class RngCursorGuard {
 public:
  RngCursorGuard() : saved_(current_rng()) {}
  explicit RngCursorGuard(const RngCursor& replacement) : saved_(current_rng()) { current_rng() = replacement; }
  ~RngCursorGuard() { current_rng() = saved_; }
  RngCursorGuard(const RngCursorGuard&) = delete;
  RngCursorGuard& operator=(const RngCursorGuard&) = delete;

 private:
  RngCursor saved_;
};

}  // namespace wick::autograd
