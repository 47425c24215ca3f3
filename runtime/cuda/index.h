// CUDA launchers for runtime/ops/index.h. Same contracts as runtime/cpu/index.h, except that
// indices are not trusted: each is clamped into [0, extent - 1] on the device (no sync to check).
//
//   cuda::index_select(out, x, element_size, index, n_index, outer, extent, inner, stream);
#pragma once

#include <cstdint>

#include "runtime/dtype.h"
#include "runtime/kernel_args.h"

namespace wick::cuda {

void index_select(void* out, const void* x, int element_size, const int64_t* index, int64_t n_index, int64_t outer,
                  int64_t extent, int64_t inner, void* stream);
// extent: the size of x along the gather axis (for clamping).
void gather(void* out, const void* x, int element_size, const StridedView& x_view, int64_t axis_stride,
            int64_t extent, const int64_t* index, int64_t n, void* stream);
// dtype F32/F64/I32/I64; accumulates with atomicAdd (order of repeated indices unspecified).
void scatter_add(void* out, DType dtype, const StridedView& out_view, int64_t axis_stride, int64_t extent,
                 const int64_t* index, const void* src, const StridedView& src_view, int64_t n, void* stream);
// dtype F32/F64/I32/I64; one thread per src element, atomicAdd (order of repeated indices unspecified).
void index_add(void* out, DType dtype, const void* src, const int64_t* index, int64_t n_index, int64_t outer,
               int64_t extent, int64_t inner, void* stream);

}  // namespace wick::cuda
