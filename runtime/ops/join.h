// Joining and splitting along an axis, and padding.
//
//   Tensor c = concat({a, b}, 1);                   // [2, 3] and [2, 5] -> [2, 8]
//   Tensor s = stack({a, b}, 0);                    // two [2, 3] -> [2, 2, 3]
//   std::vector<Tensor> parts = split(x, {3, 5}, 1); // views, no copy
//   std::vector<Tensor> qkv = chunk(x, 3, -1);      // views, no copy
//   Tensor p = pad(x, {1, 1, 2, 0}, PadMode::Reflect); // last axis by 1|1, the one before by 2|0
#pragma once

#include <vector>

#include "runtime/tensor.h"

namespace wick {

// Tensors of equal rank whose shapes agree except along `axis`, on one device; the result has
// the promoted dtype of all inputs and is a new contiguous tensor.
Tensor concat(const std::vector<Tensor>& tensors, int64_t axis);
// Tensors of identical shape, joined along a new axis at `axis` (in [-rank-1, rank]).
Tensor stack(const std::vector<Tensor>& tensors, int64_t axis);
// Views of consecutive pieces of x along axis: of `size` each (the last may be smaller) or of the
// listed sizes (which must sum to the extent).
std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t axis);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t axis);
// torch.chunk: views of ceil(extent / n_chunks) each (the last smaller); may return fewer than n.
std::vector<Tensor> chunk(const Tensor& x, int64_t n_chunks, int64_t axis);

enum class PadMode { Constant, Reflect, Replicate };
// torch.nn.functional.pad: pads = {last_before, last_after, second_last_before, ...}, at most
// 2 * rank non-negative entries. Constant fills with `value` (any dtype); Reflect mirrors without
// repeating the edge (each pad < extent); Replicate repeats the edge (extent >= 1). New tensor.
Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, PadMode mode = PadMode::Constant, double value = 0.0);

}  // namespace wick
