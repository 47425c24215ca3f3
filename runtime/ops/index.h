// Indexing: look rows up, pick along an axis, gather and scatter-add (torch semantics).
//
//   Tensor e = embedding(weight, ids);             // weight [V, D], ids I64 [B, L] -> [B, L, D]
//   Tensor r = index_select(x, 0, rows);           // rows 1-d: x[rows[i], ...]
//   Tensor g = gather(x, 1, index);                // out[i][j] = x[i][index[i][j]]
//   Tensor s = scatter_add(x, 0, index, src);      // a copy of x with src[i][j] added at x[index[i][j]][j]
//   Tensor a = index_add(x, 0, rows, src);         // a copy of x with src[i, ...] added at x[rows[i], ...]
//
// Index tensors are I32 or I64, any layout. Indices must lie in [0, extent) (no negative wrap).
// CPU: an out-of-range index throws, naming the op, the index and the extent. CUDA: checking
// would need a device-to-host sync, so kernels clamp each index into [0, extent - 1] instead: an
// out-of-range index on the GPU reads (or adds into) the nearest valid slot, never out of bounds.
#pragma once

#include "runtime/tensor.h"

namespace wick {

// weight [V, D] (any dtype), ids I32/I64 of any shape -> [*ids.shape, D] in weight's dtype.
Tensor embedding(const Tensor& weight, const Tensor& ids);
// x [..., n, ...] (n at `axis`), index 1-d [m] -> same shape as x with extent m at `axis`.
Tensor index_select(const Tensor& x, int64_t axis, const Tensor& index);
// torch.gather: index has x's rank and index.size(d) <= x.size(d) for d != axis; out has index's
// shape and x's dtype: out[..i..] = x[..index[..i..] at axis..].
Tensor gather(const Tensor& x, int64_t axis, const Tensor& index);
// torch.scatter_add, out of place: returns a copy of x (x's dtype) where for every element of
// index, src at the same position is added to out[..index at axis..]. index.size(d) <= src.size(d)
// for all d and <= x.size(d) for d != axis. Floating dtypes and I32/I64; bf16/f16 accumulate in an
// f32 copy and round once at the end. Sums over repeated indices are in unspecified order on CUDA.
Tensor scatter_add(const Tensor& x, int64_t axis, const Tensor& index, const Tensor& src);
// torch.index_add, out of place (the adjoint of index_select): returns a copy of x (x's dtype) with
// src[.., i, ..] added to out[.., index[i], ..] along `axis`. index 1-d [m]; src has x's shape
// with extent m at `axis`. Dtypes as scatter_add (bf16/f16 accumulate in an f32 copy). The CPU
// sums each output element in index order (deterministic); CUDA uses atomics (order unspecified).
Tensor index_add(const Tensor& x, int64_t axis, const Tensor& index, const Tensor& src);

}  // namespace wick
