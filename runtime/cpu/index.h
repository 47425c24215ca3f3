// CPU kernels for runtime/ops/index.h. Indices arrive as contiguous int64 already checked to lie
// in range by the front-end; kernels trust them.
//
//   cpu::index_select(out, x, element_size, index, n_index, outer, extent, inner);
#pragma once

#include <cstdint>

#include "runtime/dtype.h"
#include "runtime/kernel_args.h"

namespace wick::cpu {

// x contiguous [outer, extent, inner] -> out contiguous [outer, n_index, inner]; any dtype (copies
// element_size-byte elements).
void index_select(void* out, const void* x, int element_size, const int64_t* index, int64_t n_index, int64_t outer,
                  int64_t extent, int64_t inner);
// out (contiguous, n elements in index order) = x[x_view.offset_of(i) + index[i] * axis_stride],
// where x_view has index's shape and x's strides with the gather axis's stride set to 0.
void gather(void* out, const void* x, int element_size, const StridedView& x_view, int64_t axis_stride,
            const int64_t* index, int64_t n);
// out[out_view.offset_of(i) + index[i] * axis_stride] += src[src_view.offset_of(i)] for i < n, in
// order; out_view/src_view have index's shape (out_view's axis stride 0). dtype F32/F64/I32/I64.
void scatter_add(void* out, DType dtype, const StridedView& out_view, int64_t axis_stride, const int64_t* index,
                 const void* src, const StridedView& src_view, int64_t n);
// out contiguous [outer, extent, inner] += src contiguous [outer, n_index, inner] scattered by
// index along the middle axis: out[o, index[r], c] += src[o, r, c]. dtype F32/F64/I32/I64. Each
// output element receives its terms in order r = 0, 1, ... (threads split the columns (o, c)).
void index_add(void* out, DType dtype, const void* src, const int64_t* index, int64_t n_index, int64_t outer,
               int64_t extent, int64_t inner);

}  // namespace wick::cpu
