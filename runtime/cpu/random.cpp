#include "runtime/cpu/random.h"

#include "runtime/cpu/parallel.h"
#include "runtime/kernel_args.h"

namespace wick::cpu {

void fill_random(void* out, DType dtype, int64_t n, const RngStream& stream, uint64_t offset, RandomDistribution dist,
                 float scale, float shift) {
  if (n <= 0) return;
  uint64_t count = static_cast<uint64_t>(n);
  uint64_t first_block = offset / 4, last_block = (offset + count - 1) / 4;
  int64_t n_blocks = static_cast<int64_t>(last_block - first_block + 1);
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* values = static_cast<T*>(out);
    auto store = [values](uint64_t index, float value) { values[index] = convert<T>(value); };
    parallel_for(
        n_blocks,
        [&](int64_t begin, int64_t end) {
          for (int64_t b = begin; b < end; ++b)
            fill_block(stream, first_block + static_cast<uint64_t>(b), offset, count, dist, scale, shift, store);
        },
        /*grain=*/8192);
  });
}

}  // namespace wick::cpu
