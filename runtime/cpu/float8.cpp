#include "runtime/cpu/float8.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <type_traits>

#include "runtime/cpu/parallel.h"
#include "runtime/float8.h"

namespace wick::cpu {
namespace {

// Rows per task: about `default_grain` elements each.
int64_t row_grain(int64_t cols) { return std::max<int64_t>(1, default_grain / std::max<int64_t>(1, cols)); }

// The f32 value of every code, built once: the dequantize loop is a table lookup (a gather) and a
// multiply, which the compiler vectorizes.
const std::array<float, 256>& e4m3_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int code = 0; code < 256; ++code) t[static_cast<size_t>(code)] = e4m3_to_f32(static_cast<uint8_t>(code));
    return t;
  }();
  return table;
}

template <typename T>
float as_f32(T value) {
  return static_cast<float>(value);
}

template <typename T>
void row_absmax_typed(float* amax, const T* w, int64_t rows, int64_t cols) {
  parallel_for(
      rows,
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const T* row = w + r * cols;
          float most = 0.0f;
          bool nan = false;
          for (int64_t c = 0; c < cols; ++c) {
            const float magnitude = std::fabs(as_f32(row[c]));
            nan = nan || std::isnan(magnitude);
            most = magnitude > most ? magnitude : most;
          }
          amax[r] = nan ? NAN : most;
        }
      },
      row_grain(cols));
}

template <typename T>
void quantize_typed(uint8_t* codes, const float* scales, const T* w, int64_t rows, int64_t cols, bool per_row) {
  parallel_for(
      rows,
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const float scale = scales[per_row ? r : 0];
          const T* row = w + r * cols;
          uint8_t* out = codes + r * cols;
          for (int64_t c = 0; c < cols; ++c) out[c] = f32_to_e4m3(as_f32(row[c]) / scale);
        }
      },
      row_grain(cols));
}

template <typename T>
void dequantize_typed(T* out, const uint8_t* codes, const float* scales, int64_t rows, int64_t cols, bool per_row) {
  const float* table = e4m3_table().data();
  parallel_for(
      rows,
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const float scale = scales[per_row ? r : 0];
          const uint8_t* in = codes + r * cols;
          T* row = out + r * cols;
          for (int64_t c = 0; c < cols; ++c) {
            const float value = table[in[c]] * scale;
            row[c] = static_cast<T>(value);
          }
        }
      },
      row_grain(cols));
}

}  // namespace

void row_absmax(float* amax, const void* w, DType dtype, int64_t rows, int64_t cols) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, bf16> ||
                  std::is_same_v<T, f16>)
      row_absmax_typed(amax, static_cast<const T*>(w), rows, cols);
  });
}

void quantize_float8(uint8_t* codes, const float* scales, const void* w, DType dtype, int64_t rows, int64_t cols,
                     bool per_row) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, bf16> ||
                  std::is_same_v<T, f16>)
      quantize_typed(codes, scales, static_cast<const T*>(w), rows, cols, per_row);
  });
}

void dequantize_float8(void* out, DType dtype, const uint8_t* codes, const float* scales, int64_t rows, int64_t cols,
                       bool per_row) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, bf16> ||
                  std::is_same_v<T, f16>)
      dequantize_typed(static_cast<T*>(out), codes, scales, rows, cols, per_row);
  });
}

}  // namespace wick::cpu
