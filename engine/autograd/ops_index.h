// Differentiable indexing (runtime/ops/index.h with gradients). Index tensors (ids, index) are
// never differentiable: they are saved as constants and get no gradient.
//
//   Tensor e = autograd::embedding(weight, ids);      // d weight: rows of de summed per id
//   Tensor g = autograd::gather(x, 1, index);         // dx = scatter_add(zeros, 1, index, dg)
//
// Every gradient into the indexed tensor is a scatter-add of the output gradient, through the
// runtime scatter_add (the index broadcast to the gradient's shape is materialized as i64 there):
// serial and deterministic on the CPU; on CUDA it uses atomics, so sums over repeated indices
// are in unspecified order (bitwise run-to-run differences of a few ulp are possible). Gradients of
// bf16/f16 tensors are accumulated and returned in f32 (the engine casts where needed).
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
