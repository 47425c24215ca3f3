// CUDA launchers for runtime/ops/float8.h; the same contracts as runtime/cpu/float8.h, on `stream`
// (a cudaStream_t), with every pointer on the current device.
//
//   cuda::row_absmax(amax, w, DType::BF16, rows, cols, stream);
//   cuda::quantize_float8(codes, scales, w, DType::BF16, rows, cols, /*per_row=*/true, stream);
//   cuda::dequantize_float8(out, DType::BF16, codes, scales, rows, cols, /*per_row=*/true, stream);
#pragma once

#include <cstdint>

#include "runtime/dtype.h"

namespace wick::cuda {

// amax[r] = max |w[r, :]| (f32; NaN if the row holds one); one block per row.
void row_absmax(float* amax, const void* w, DType dtype, int64_t rows, int64_t cols, void* stream);
void quantize_float8(uint8_t* codes, const float* scales, const void* w, DType dtype, int64_t rows, int64_t cols,
                     bool per_row, void* stream);
// Reads 8 codes per thread when cols is a multiple of 8 (the pointers allocated by wick are aligned).
void dequantize_float8(void* out, DType dtype, const uint8_t* codes, const float* scales, int64_t rows, int64_t cols,
                       bool per_row, void* stream);

}  // namespace wick::cuda
