#include "engine/autograd/rng_state.h"

#include <utility>

#include "runtime/error.h"

namespace wick::autograd {

RngCursor& current_rng() {
  thread_local RngCursor cursor{derive_stream(0, 0, 0, RngPurpose::Dropout), 0};
  return cursor;
}

RngSpan take(int64_t n) {
  WICK_CHECK(n >= 0, "take: cannot draw a negative number (", n, ") of random elements");
  RngCursor& cursor = current_rng();
  RngSpan taken{cursor.stream, cursor.offset};
  cursor.offset += static_cast<uint64_t>(n);
  return taken;
}

void set_sample_streams(std::vector<RngStream> streams) {
  RngCursor& cursor = current_rng();
  cursor.sample_streams = std::move(streams);
  cursor.sample_offset = 0;
}

std::vector<RngStream> per_sample_streams(uint64_t seed, const std::vector<int64_t>& ids, uint64_t epoch,
                                          RngPurpose purpose) {
  std::vector<RngStream> streams;
  streams.reserve(ids.size());
  for (int64_t id : ids) {
    WICK_CHECK(id >= 0, "per_sample_streams: sample id ", id, " is negative");
    streams.push_back(derive_stream(seed, static_cast<uint64_t>(id), epoch, purpose));
  }
  return streams;
}

bool draws_per_sample(int64_t rows) {
  const RngCursor& cursor = current_rng();
  return !cursor.sample_streams.empty() && rows == static_cast<int64_t>(cursor.sample_streams.size());
}

uint64_t take_per_sample(int64_t per_sample) {
  WICK_CHECK(per_sample >= 0, "take_per_sample: cannot draw a negative number (", per_sample, ") of random elements");
  RngCursor& cursor = current_rng();
  WICK_CHECK(!cursor.sample_streams.empty(), "take_per_sample: the cursor has no per-sample streams");
  const uint64_t offset = cursor.sample_offset;
  cursor.sample_offset += static_cast<uint64_t>(per_sample);
  return offset;
}

}  // namespace wick::autograd
