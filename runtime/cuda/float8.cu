// e4m3 weight codes: the |w| maximum of each row, the scales, quantization and dequantization.
// The conversions are runtime/float8.h's (bit-exact with torch); divisions and products are the
// IEEE round-to-nearest ones (__fdiv_rn, __fmul_rn), so results equal the CPU kernels'.
#include <cuda_runtime.h>

#include <type_traits>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/float8.h"
#include "runtime/cuda/launch.cuh"
#include "runtime/float8.h"
#include "runtime/kernel_args.h"

namespace wick::cuda {
namespace {

// ---- kernels ----
template <typename T>
__device__ __forceinline__ float to_f32(T value) {
  return static_cast<float>(static_cast<compute_t<T>>(value));
}

// One block of block_size threads per row (grid-stride over rows).
template <typename T>
__global__ void row_absmax_kernel(float* amax, const T* w, int64_t rows, int64_t cols) {
  __shared__ float partial[block_size / 32];
  __shared__ int any_nan;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    if (threadIdx.x == 0) any_nan = 0;
    __syncthreads();
    const T* row = w + r * cols;
    float most = 0.0f;
    bool nan = false;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float magnitude = fabsf(to_f32(row[c]));
      nan = nan || isnan(magnitude);
      most = fmaxf(most, magnitude);
    }
    if (nan) any_nan = 1;
    for (int offset = 16; offset > 0; offset /= 2) most = fmaxf(most, __shfl_xor_sync(0xffffffffu, most, offset));
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = most;
    __syncthreads();
    if (threadIdx.x == 0) {
      float total = 0.0f;
      for (int k = 0; k < block_size / 32; ++k) total = fmaxf(total, partial[k]);
      amax[r] = any_nan ? __int_as_float(0x7fc00000) : total;
    }
    __syncthreads();
  }
}

template <typename T>
__global__ void quantize_kernel(uint8_t* codes, const float* scales, const T* w, int64_t rows, int64_t cols,
                                bool per_row) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float scale = scales[per_row ? i / cols : 0];
    codes[i] = f32_to_e4m3(__fdiv_rn(to_f32(w[i]), scale));
  }
}

// Eight codes (one 8-byte load) per thread; cols % 8 == 0, so the eight share a row.
template <typename T>
__global__ void dequantize_packed_kernel(T* out, const uint8_t* codes, const float* scales, int64_t rows, int64_t cols,
                                         bool per_row) {
  const int64_t n_packs = rows * cols / 8;
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < n_packs;
       p += int64_t(gridDim.x) * blockDim.x) {
    const float scale = scales[per_row ? p * 8 / cols : 0];
    const uint2 packed = reinterpret_cast<const uint2*>(codes)[p];
    const uint32_t words[2] = {packed.x, packed.y};
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const auto code = static_cast<uint8_t>(words[k / 4] >> (8 * (k % 4)));
      out[p * 8 + k] = convert<T>(__fmul_rn(e4m3_to_f32(code), scale));
    }
  }
}

template <typename T>
__global__ void dequantize_kernel(T* out, const uint8_t* codes, const float* scales, int64_t rows, int64_t cols,
                                  bool per_row) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = convert<T>(__fmul_rn(e4m3_to_f32(codes[i]), scales[per_row ? i / cols : 0]));
}

template <typename T>
constexpr bool is_float_type() {
  return std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, bf16> || std::is_same_v<T, f16>;
}

}  // namespace

// ---- launchers ----
void row_absmax(float* amax, const void* w, DType dtype, int64_t rows, int64_t cols, void* stream) {
  if (rows == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (is_float_type<T>()) {
      const auto blocks = static_cast<unsigned>(rows < 65535 ? rows : 65535);
      row_absmax_kernel<T><<<blocks, block_size, 0, s>>>(amax, static_cast<const T*>(w), rows, cols);
      CUDA_CHECK_LAUNCH();
    }
  });
}

void quantize_float8(uint8_t* codes, const float* scales, const void* w, DType dtype, int64_t rows, int64_t cols,
                     bool per_row, void* stream) {
  if (rows * cols == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (is_float_type<T>()) {
      quantize_kernel<T><<<grid_for(rows * cols), block_size, 0, s>>>(codes, scales, static_cast<const T*>(w), rows,
                                                                       cols, per_row);
      CUDA_CHECK_LAUNCH();
    }
  });
}

void dequantize_float8(void* out, DType dtype, const uint8_t* codes, const float* scales, int64_t rows, int64_t cols,
                       bool per_row, void* stream) {
  if (rows * cols == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  const bool packed = cols % 8 == 0 && reinterpret_cast<uintptr_t>(codes) % 8 == 0;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (is_float_type<T>()) {
      if (packed) {
        dequantize_packed_kernel<T><<<grid_for(rows * cols / 8), block_size, 0, s>>>(static_cast<T*>(out), codes,
                                                                                      scales, rows, cols, per_row);
      } else {
        dequantize_kernel<T><<<grid_for(rows * cols), block_size, 0, s>>>(static_cast<T*>(out), codes, scales, rows,
                                                                           cols, per_row);
      }
      CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace wick::cuda
