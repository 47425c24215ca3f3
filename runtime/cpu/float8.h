// CPU kernels for runtime/ops/float8.h: e4m3 weight codes with f32 scales (runtime/float8.h holds
// the conversions).
//
//   cpu::quantize_float8(codes, scales, w, DType::BF16, rows, cols, /*per_row=*/true);
//   cpu::dequantize_float8(out, DType::BF16, codes, scales, rows, cols, /*per_row=*/true);
#pragma once

#include <cstdint>

#include "runtime/dtype.h"

namespace wick::cpu {

// The largest |w| of each row of a contiguous [rows, cols] matrix (F32, F64, BF16 or F16) into
// amax[rows] (f32; NaN if the row holds one).
void row_absmax(float* amax, const void* w, DType dtype, int64_t rows, int64_t cols);

// codes[r, c] = f32_to_e4m3(float(w[r, c]) / scales[per_row ? r : 0]) for a contiguous [rows, cols]
// matrix (F32, F64 cast to f32 first, BF16 or F16); the division is f32, rounded to nearest.
void quantize_float8(uint8_t* codes, const float* scales, const void* w, DType dtype, int64_t rows, int64_t cols,
                     bool per_row);

// out[r, c] = e4m3_to_f32(codes[r, c]) * scales[per_row ? r : 0] (an f32 product), rounded to dtype
// (F32, F64, BF16 or F16); contiguous [rows, cols].
void dequantize_float8(void* out, DType dtype, const uint8_t* codes, const float* scales, int64_t rows, int64_t cols,
                       bool per_row);

}  // namespace wick::cpu
