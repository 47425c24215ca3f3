#include "engine/keras/batching.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "runtime/error.h"
#include "runtime/ops/index.h"
#include "runtime/philox.h"

namespace wick::keras {

std::vector<int64_t> shuffled_order(int64_t n, uint64_t seed, uint64_t epoch) {
  WICK_CHECK(n >= 0, "shuffled_order: negative sample count ", n);
  RngStream stream = derive_stream(seed, epoch, 0, RngPurpose::Shuffle);
  std::vector<uint64_t> keys(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    PhiloxBlock block = stream_block(stream, static_cast<uint64_t>(i));
    keys[static_cast<size_t>(i)] = (static_cast<uint64_t>(block.word[0]) << 32) | block.word[1];
  }
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    uint64_t ka = keys[static_cast<size_t>(a)], kb = keys[static_cast<size_t>(b)];
    return ka != kb ? ka < kb : a < b;
  });
  return order;
}

Tensor take_rows(const Tensor& x, const std::vector<int64_t>& order, int64_t start, int64_t count, Device device) {
  WICK_CHECK(x.dim() >= 1 && start >= 0 && count >= 0 && start + count <= x.size(0), "take_rows: rows [", start,
             ", ", start + count, ") of ", x.describe());
  if (order.empty()) return x.narrow(0, start, count).to(device);
  std::vector<int64_t> rows(order.begin() + start, order.begin() + start + count);
  Tensor index = Tensor::from_vector<int64_t>(rows, {count}, x.device());
  return index_select(x, 0, index).to(device);
}

int64_t split_point(int64_t n, double fraction) {
  WICK_CHECK(fraction >= 0.0 && fraction < 1.0, "validation_split must be in [0, 1), got ", fraction);
  return static_cast<int64_t>(std::floor(static_cast<double>(n) * (1.0 - fraction)));
}

std::pair<Tensor, Tensor> split_last(const Tensor& x, double fraction) {
  int64_t cut = split_point(x.size(0), fraction);
  return {x.narrow(0, 0, cut), x.narrow(0, cut, x.size(0) - cut)};
}

}  // namespace wick::keras
