// The engine's implicit random-number cursor: where layers that draw random numbers without being
// handed a stream (dropout inside a block) take them from.
//
//   current_rng() = RngCursor{derive_stream(seed, step, rank, RngPurpose::Dropout), 0};  // per step
//   RngCursor c = take(x.numel());                   // elements [c.offset, c.offset + n) are ours
//   Tensor keep = bernoulli_mask(x.shape(), 0.9, c.stream, x.device(), c.offset);
//
//   RngCursor snapshot = current_rng();              // gradient checkpointing, before the forward
//   ... forward (draws, advancing the cursor) ...
//   { RngCursorGuard replay(snapshot); ... recompute: the same draws, the same numbers ... }
//   // leaving the guard restores the cursor to where it was before the replay
//
// Scheme: one cursor per thread (thread_local), a Philox stream plus an element offset. Every
// draw of n elements takes [offset, offset + n) of the stream and advances the offset by n, so
// draws never overlap within a stream and the numbers depend only on the stream and on the order
// of draws. The training loop sets the cursor (typically a fresh stream per step and data-parallel
// rank: derive_stream(seed, step, rank, RngPurpose::Dropout), offset 0), so results are
// reproducible and independent of the device. The default cursor is
// {derive_stream(0, 0, 0, RngPurpose::Dropout), 0}. Offsets are in elements of the stream (as
// the offset argument of runtime/ops/random.h).
#pragma once

#include <cstdint>

#include "runtime/philox.h"

namespace wick::autograd {

struct RngCursor {
  RngStream stream;
  uint64_t offset = 0;
};

// This thread's cursor (assignable).
RngCursor& current_rng();
// Returns the cursor as it is, then advances its offset by n (n >= 0): the caller owns elements
// [offset, offset + n) of the stream.
RngCursor take(int64_t n);

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
