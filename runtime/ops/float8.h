// Float8 (e4m3) weights: frozen Linear weights stored as one byte per element (U8 codes, the bytes
// of torch.float8_e4m3fn) with f32 scales, one per row or one per tensor, dequantized on the fly.
//
//   Float8Weight q = quantize_float8(w, Float8Scaling::PerRow);    // w [out, in] bf16 -> codes, scale
//   Tensor w2 = dequantize_float8(q.codes, q.scale, DType::BF16);  // codes * scale, rounded to bf16
//   Tensor y = float8_linear(x, q.codes, q.scale, bias);           // x [..., in] -> [..., out] in x's dtype
//
// Quantization, as torchao / ai-toolkit do with torch (tests/reference/make_float8_fixtures.py):
// amax = max |w| per row (or over the tensor) in f32; scale = amax / 448, or 1 for zeros;
// codes = e4m3(clamp(w / scale, -448, 448)), rounded to nearest even (runtime/float8.h). Every
// code and scale equals torch's bit for bit. Dequantization: e4m3_to_f32(code) * scale in f32,
// then rounded to the compute dtype. Kernels: runtime/cpu/float8.h, runtime/cuda/float8.h.
#pragma once

#include "runtime/tensor.h"

namespace wick {

enum class Float8Scaling {
  PerRow,     // one f32 scale per output row: scale [rows]
  PerTensor,  // one f32 scale: scale [1]
};
// "per_row", "per_tensor"
const char* float8_scaling_name(Float8Scaling scaling);

struct Float8Weight {
  Tensor codes;  // U8 [rows, cols], contiguous, on the weight's device
  Tensor scale;  // F32 [rows] (per row) or [1] (per tensor)
};

// Quantizes a 2-d floating weight (any device, any strides). A weight holding NaN or ±inf is a
// WickError (Data): no scale represents it.
Float8Weight quantize_float8(const Tensor& weight, Float8Scaling scaling);

// codes U8 [rows, cols] (contiguous, as loaded or quantized) with `scale` F32 holding 1 value
// (any shape: [], [1]) or `rows` values ([rows] or [rows, 1]); an undefined scale means 1. Returns
// a new contiguous [rows, cols] tensor in `dtype` (floating) on the codes' device.
Tensor dequantize_float8(const Tensor& codes, const Tensor& scale, DType dtype);

// linear(x, dequantize_float8(codes, scale, x.dtype()), bias): the dense weight lives only for the
// product. x [..., in] floating; codes [out, in]; bias [out] or undefined.
Tensor float8_linear(const Tensor& x, const Tensor& codes, const Tensor& scale, const Tensor& bias = Tensor());

// The codes' bytes of a float8 weight, plus its scales: what a dequantization reads.
int64_t float8_bytes(const Tensor& codes, const Tensor& scale);

}  // namespace wick
