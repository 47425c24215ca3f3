#include "engine/autograd/rng_state.h"

#include "runtime/error.h"

namespace wick::autograd {

RngCursor& current_rng() {
  thread_local RngCursor cursor{derive_stream(0, 0, 0, RngPurpose::Dropout), 0};
  return cursor;
}

RngCursor take(int64_t n) {
  WICK_CHECK(n >= 0, "take: cannot draw a negative number (", n, ") of random elements");
  RngCursor& cursor = current_rng();
  RngCursor taken = cursor;
  cursor.offset += static_cast<uint64_t>(n);
  return taken;
}

}  // namespace wick::autograd
