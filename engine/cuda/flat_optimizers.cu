// CUDA kernels of the fused optimizer steps. The per-element math is optimizer_math.h, shared with
// the CPU kernels (same rounding: bitwise-equal results).
//
// 8-bit AdamW: one thread block of 256 threads per 256-element quantization block (grid-stride
// over blocks), one element per thread; both maps in shared memory; absmax by warp shuffles then
// across the 8 warps through shared memory; requantization by binary search over the shared map.
#include "engine/optim/flat_optimizer_kernels.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/launch.cuh"

namespace wick::cuda {

namespace om = optim_math;

namespace {
constexpr int quant_block = 256;  // elements per quantization block == threads per CUDA block
constexpr int n_warps = quant_block / 32;

// ---- kernels ----

// Adds the number of lanes with bad != 0 to *counter: one atomic per warp at most. All 32 lanes
// of the warp must call it (the loops below keep whole warps together).
__device__ __forceinline__ void add_count(int64_t* counter, int bad) {
  unsigned mask = __ballot_sync(0xffffffffu, bad != 0);
  if (mask != 0 && (threadIdx.x & 31) == 0)
    atomicAdd(reinterpret_cast<unsigned long long*>(counter), static_cast<unsigned long long>(__popc(mask)));
}

__global__ void sgd_kernel(float* p, const float* g, float* buf, int64_t n, om::SgdScalars s, int64_t* counter) {
  int64_t stride = int64_t(gridDim.x) * blockDim.x;
  int64_t n_rounded = (n + 31) / 32 * 32;  // whole warps stay in the loop for the ballot
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n_rounded; i += stride) {
    int bad = 0;
    if (i < n) bad = om::sgd_element(g[i], p[i], s.has_momentum ? buf + i : nullptr, s) ? 0 : 1;
    add_count(counter, bad);
  }
}

__global__ void adamw32_kernel(float* p, const float* g, float* m, float* v, int64_t n, om::AdamScalars s,
                               int64_t* counter) {
  int64_t stride = int64_t(gridDim.x) * blockDim.x;
  int64_t n_rounded = (n + 31) / 32 * 32;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n_rounded; i += stride) {
    int bad = 0;
    if (i < n) bad = om::adamw32_element(g[i], p[i], m[i], v[i], s) ? 0 : 1;
    add_count(counter, bad);
  }
}

__device__ __forceinline__ float warp_max(float x) {
  for (int offset = 16; offset > 0; offset >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

__global__ void __launch_bounds__(quant_block)
    adamw8bit_kernel(float* p, const float* g, uint8_t* m_codes, uint8_t* v_codes, float* absmax_m, float* absmax_v,
                     const float* maps, int64_t n, om::AdamScalars s, int64_t* counter) {
  __shared__ float signed_map[256];
  __shared__ float unsigned_map[256];
  __shared__ float warp_max_m[n_warps], warp_max_v[n_warps];
  signed_map[threadIdx.x] = maps[threadIdx.x];
  unsigned_map[threadIdx.x] = maps[256 + threadIdx.x];
  __syncthreads();

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int64_t n_blocks = (n + quant_block - 1) / quant_block;
  for (int64_t b = blockIdx.x; b < n_blocks; b += gridDim.x) {
    int64_t i = b * quant_block + threadIdx.x;
    bool valid = i < n;
    float m = 0.0f, v = 0.0f;
    bool ok = false;
    if (valid) {
      m = om::mul_rn(signed_map[m_codes[i]], absmax_m[b]);
      v = om::mul_rn(unsigned_map[v_codes[i]], absmax_v[b]);
      ok = om::adam8bit_moments(g[i], m, v, s);
    }
    add_count(counter, valid && !ok ? 1 : 0);
    // absmax over the valid elements (padding lanes hold 0, the identity of a max of |x|)
    float local_m = warp_max(fabsf(m)), local_v = warp_max(fabsf(v));
    if (lane == 0) {
      warp_max_m[warp] = local_m;
      warp_max_v[warp] = local_v;
    }
    __syncthreads();  // also orders every thread's read of absmax_*[b] before thread 0 rewrites it
    float new_absmax_m = warp_max_m[0], new_absmax_v = warp_max_v[0];
#pragma unroll
    for (int w = 1; w < n_warps; ++w) {
      new_absmax_m = fmaxf(new_absmax_m, warp_max_m[w]);
      new_absmax_v = fmaxf(new_absmax_v, warp_max_v[w]);
    }
    if (threadIdx.x == 0) {
      absmax_m[b] = new_absmax_m;
      absmax_v[b] = new_absmax_v;
    }
    if (valid) {
      if (ok) p[i] = om::adam8bit_param(p[i], m, v, s);
      m_codes[i] = om::requantize(signed_map, m, new_absmax_m, true);
      v_codes[i] = om::requantize(unsigned_map, v, new_absmax_v, false);
    }
    __syncthreads();  // warp_max_* is reused by this block's next quantization block
  }
}

}  // namespace

// ---- launchers ----

void sgd_step(float* p, const float* g, float* momentum_buffer, int64_t n, const om::SgdScalars& s,
              int64_t* n_nonfinite, void* stream) {
  if (n == 0) return;
  sgd_kernel<<<grid_for(n), block_size, 0, static_cast<cudaStream_t>(stream)>>>(p, g, momentum_buffer, n, s,
                                                                                n_nonfinite);
  CUDA_CHECK_LAUNCH();
}

void adamw32_step(float* p, const float* g, float* m, float* v, int64_t n, const om::AdamScalars& s,
                  int64_t* n_nonfinite, void* stream) {
  if (n == 0) return;
  adamw32_kernel<<<grid_for(n), block_size, 0, static_cast<cudaStream_t>(stream)>>>(p, g, m, v, n, s, n_nonfinite);
  CUDA_CHECK_LAUNCH();
}

void adamw8bit_step(float* p, const float* g, uint8_t* m_codes, uint8_t* v_codes, float* absmax_m,
                    float* absmax_v, const float* maps, int64_t n, const om::AdamScalars& s,
                    int64_t* n_nonfinite, void* stream) {
  if (n == 0) return;
  int64_t n_blocks = (n + quant_block - 1) / quant_block;
  unsigned grid = static_cast<unsigned>(n_blocks < 65535 * 8 ? n_blocks : 65535 * 8);
  adamw8bit_kernel<<<grid, quant_block, 0, static_cast<cudaStream_t>(stream)>>>(
      p, g, m_codes, v_codes, absmax_m, absmax_v, maps, n, s, n_nonfinite);
  CUDA_CHECK_LAUNCH();
}

}  // namespace wick::cuda
