// Sample order and mini-batches for Model::fit / evaluate / predict.
//
//   std::vector<int64_t> order = shuffled_order(60000, /*seed=*/0, /*epoch=*/3);   // a permutation
//   Tensor xb = take_rows(x, order, /*start=*/128, /*count=*/128, Device::cpu());
//   auto [train, val] = split_last(x, 0.1);    // the last 10% of the samples, as Keras
//
// The shuffle sorts samples by 64-bit Philox keys from derive_stream(seed, epoch, 0,
// RngPurpose::Shuffle) (key of sample i: words 0 and 1 of block i; ties by index), so the order is
// the same on every platform and device.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "runtime/tensor.h"

namespace wick::keras {

// A permutation of 0..n-1, a pure function of (n, seed, epoch).
std::vector<int64_t> shuffled_order(int64_t n, uint64_t seed, uint64_t epoch);

// Rows order[start, start + count) of x along axis 0, on `device`. An empty `order` means the
// identity (then the rows are a view when x is already on `device`).
Tensor take_rows(const Tensor& x, const std::vector<int64_t>& order, int64_t start, int64_t count, Device device);

// Views of the first and the last part of x along axis 0, cut at split_point: the last
// n - floor(n (1 - fraction)) samples form the second part (Keras's validation_split).
std::pair<Tensor, Tensor> split_last(const Tensor& x, double fraction);
// floor(n (1 - fraction)), the number of samples before the cut; fraction in [0, 1).
int64_t split_point(int64_t n, double fraction);

}  // namespace wick::keras
