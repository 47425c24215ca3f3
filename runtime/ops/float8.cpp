#include "runtime/ops/float8.h"

#include <cmath>
#include <vector>

#include "runtime/cpu/float8.h"
#include "runtime/cuda/cuda_api.h"
#include "runtime/cuda/float8.h"
#include "runtime/float8.h"
#include "runtime/ops/matmul.h"

namespace wick {
namespace {

bool float8_source_dtype(DType dtype) {
  return dtype == DType::F32 || dtype == DType::F64 || dtype == DType::BF16 || dtype == DType::F16;
}

// The scale as a contiguous f32 tensor on `device`, and whether it has one value per row.
std::pair<Tensor, bool> checked_scale(const Tensor& codes, const Tensor& scale, const char* op) {
  const int64_t rows = codes.size(0);
  if (!scale.defined()) return {Tensor::scalar(1.0, DType::F32, codes.device()).reshape({1}), false};
  WICK_CHECK(scale.dtype() == DType::F32, op, ": scale ", scale.describe(), " must be f32");
  WICK_CHECK(scale.device() == codes.device(), op, ": scale ", scale.describe(), " and codes ", codes.describe(),
             " are on different devices");
  WICK_CHECK(scale.numel() == 1 || scale.numel() == rows, op, ": scale ", scale.describe(),
             " must hold one value or one per row of codes ", codes.describe());
  return {scale.contiguous(), scale.numel() != 1 || rows == 1};
}

}  // namespace

const char* float8_scaling_name(Float8Scaling scaling) {
  return scaling == Float8Scaling::PerRow ? "per_row" : "per_tensor";
}

Float8Weight quantize_float8(const Tensor& weight, Float8Scaling scaling) {
  const char* op = "quantize_float8";
  WICK_CHECK(weight.defined() && weight.dim() == 2, op, ": expected a 2-d weight, got ",
             weight.defined() ? weight.describe() : std::string("(none)"));
  WICK_CHECK(float8_source_dtype(weight.dtype()), op, ": the weight ", weight.describe(),
             " must be f32, f64, bf16 or f16");
  const Tensor w = weight.contiguous();
  const int64_t rows = w.size(0), cols = w.size(1);
  const Device device = w.device();
  const bool per_row = scaling == Float8Scaling::PerRow;
  Tensor row_amax = Tensor::empty({rows}, DType::F32, device);
  Tensor codes = Tensor::empty({rows, cols}, DType::U8, device);
  if (device.is_cpu()) {
    cpu::row_absmax(row_amax.data_as<float>(), w.data(), w.dtype(), rows, cols);
  } else {
    cuda::set_device(device.index);
    cuda::row_absmax(row_amax.data_as<float>(), w.data(), w.dtype(), rows, cols, current_stream(device).handle);
  }
  // Scales come from the row maxima on the host (a load-time operation: rows values), which also
  // checks them.
  std::vector<float> amax = row_amax.to_vector<float>();
  for (int64_t r = 0; r < rows; ++r)
    WICK_CHECK_KIND(Data, std::isfinite(amax[static_cast<size_t>(r)]), op, ": row ", r, " of the weight ",
                    w.describe(), " holds NaN or infinity; a float8 scale cannot represent it");
  std::vector<float> scales(static_cast<size_t>(per_row ? rows : 1));
  if (per_row) {
    for (int64_t r = 0; r < rows; ++r) scales[static_cast<size_t>(r)] = e4m3_scale(amax[static_cast<size_t>(r)]);
  } else {
    float most = 0.0f;
    for (float a : amax) most = a > most ? a : most;
    scales[0] = e4m3_scale(most);
  }
  Tensor scale = Tensor::from_vector<float>(scales, {static_cast<int64_t>(scales.size())}, device);
  if (device.is_cpu()) {
    cpu::quantize_float8(codes.data_as<uint8_t>(), scale.data_as<float>(), w.data(), w.dtype(), rows, cols, per_row);
  } else {
    cuda::quantize_float8(codes.data_as<uint8_t>(), scale.data_as<float>(), w.data(), w.dtype(), rows, cols, per_row,
                          current_stream(device).handle);
  }
  return {codes, scale};
}

Tensor dequantize_float8(const Tensor& codes, const Tensor& scale, DType dtype) {
  const char* op = "dequantize_float8";
  WICK_CHECK(codes.defined() && codes.dim() == 2 && codes.dtype() == DType::U8, op,
             ": codes must be u8 [rows, cols], got ", codes.defined() ? codes.describe() : std::string("(none)"));
  WICK_CHECK(float8_source_dtype(dtype), op, ": the result dtype must be f32, f64, bf16 or f16, got ",
             dtype_name(dtype));
  auto [scales, per_row] = checked_scale(codes, scale, op);
  const Tensor c = codes.contiguous();
  const int64_t rows = c.size(0), cols = c.size(1);
  const Device device = c.device();
  Tensor out = Tensor::empty({rows, cols}, dtype, device);
  if (device.is_cpu()) {
    cpu::dequantize_float8(out.data(), dtype, c.data_as<uint8_t>(), scales.data_as<float>(), rows, cols, per_row);
  } else {
    cuda::set_device(device.index);
    cuda::dequantize_float8(out.data(), dtype, c.data_as<uint8_t>(), scales.data_as<float>(), rows, cols, per_row,
                            current_stream(device).handle);
  }
  return out;
}

Tensor float8_linear(const Tensor& x, const Tensor& codes, const Tensor& scale, const Tensor& bias) {
  WICK_CHECK(x.defined() && is_floating(x.dtype()), "float8_linear: x must be floating, got ",
             x.defined() ? x.describe() : std::string("(none)"));
  WICK_CHECK(codes.defined() && codes.dim() == 2 && x.dim() >= 1 && x.size(-1) == codes.size(1),
             "float8_linear: x ", x.describe(), " does not end in the ", codes.defined() ? codes.size(-1) : 0,
             " input features of codes ", codes.defined() ? codes.describe() : std::string("(none)"));
  WICK_CHECK(x.device() == codes.device(), "float8_linear: x ", x.describe(), " and codes ", codes.describe(),
             " on different devices");
  return linear(x, dequantize_float8(codes, scale, x.dtype()), bias);
}

int64_t float8_bytes(const Tensor& codes, const Tensor& scale) {
  return static_cast<int64_t>(codes.nbytes()) + (scale.defined() ? static_cast<int64_t>(scale.nbytes()) : 0);
}

}  // namespace wick
