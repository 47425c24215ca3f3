// Differentiable indexing (runtime/ops/index.h with gradients). Index tensors (ids, index) are
// never differentiable: they are saved as constants and get no gradient.
//
//   Tensor e = autograd::embedding(weight, ids);      // d weight: rows of de summed per id
//   Tensor g = autograd::gather(x, 1, index);         // dx = scatter_add(zeros, 1, index, dg)
//
// Every gradient into the indexed tensor is a scatter-add of the output gradient into zeros:
// embedding and index_select through the runtime index_add (rows added along the axis, the 1-d
// index used as is), gather through scatter_add. On the CPU both add in a fixed order
// (deterministic); on CUDA they use atomics, so sums over repeated indices are in unspecified
// order (run-to-run differences of a few ulp are possible). Gradients of bf16/f16 tensors are
// accumulated and returned in f32 (the engine casts where needed).
#pragma once

#include "runtime/tensor.h"

namespace wick::autograd {

// Same contracts as the runtime ops of the same names. Gradients flow to weight / x / src only.
Tensor embedding(const Tensor& weight, const Tensor& ids);
Tensor index_select(const Tensor& x, int64_t axis, const Tensor& index);
Tensor gather(const Tensor& x, int64_t axis, const Tensor& index);
// out = x with src scattered in: dx = dout, dsrc = gather(dout, axis, index) (zero where index
// does not reach, when src is larger than index).
Tensor scatter_add(const Tensor& x, int64_t axis, const Tensor& index, const Tensor& src);

}  // namespace wick::autograd
