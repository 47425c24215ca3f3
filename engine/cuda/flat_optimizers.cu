// CUDA kernels of the fused optimizer steps, and the gradient-norm and clipping passes of
// Optimizer::step. The per-element math is optimizer_math.h, shared with the CPU kernels (same
// rounding: bitwise-equal results).
//
// 8-bit AdamW: one warp per 256-element quantization block, 8 elements per lane in two runs of 4
// (16-byte loads of p and g, one 32-bit word of 4 codes per moment); 8 warps per CUDA block, a
// grid of resident blocks striding over the quantization blocks. absmax by warp shuffles; the
// maps in shared memory, linear for dequantization and as breadth-first search trees for the
// requantization search (requantize_tree); skipped elements counted per thread, one atomic per
// CUDA block at the end.
#include <atomic>

#include <cuda_runtime.h>

#include "engine/optim/flat_optimizer_kernels.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/launch.cuh"

namespace wick::cuda {

namespace om = optim_math;

namespace {
constexpr int quant_block = 256;         // elements per quantization block
constexpr int warps_8bit = 8;            // quantization blocks in flight per CUDA block
constexpr int threads_8bit = 32 * warps_8bit;
constexpr int run = 4;                   // consecutive elements per 16-byte load
constexpr int per_lane = quant_block / 32;  // 8: two runs, at lane*4 and 128 + lane*4

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

// Element j of a lane (j < 8) sits at lane*4 + j (j < 4) or 128 + lane*4 + (j - 4) in its block.
__device__ __forceinline__ int element_in_block(int lane, int j) { return (j / run) * 128 + lane * run + j % run; }

// One lane's 8 elements of a quantization block.
struct LaneData {
  float p[per_lane], g[per_lane];
  uint32_t m_codes[2], v_codes[2];  // 4 codes per word, element j in byte j % 4 of word j / 4
};

// Loads a lane's elements of the block at `base`: 16-byte loads when the whole block lies in
// [0, n) and `vector_io`, else one element at a time (elements past n read as p = g = 0, codes 0).
__device__ __forceinline__ void load_lane(LaneData& d, const float* p, const float* g, const uint8_t* m_codes,
                                          const uint8_t* v_codes, int64_t base, int64_t n, int lane, bool vector) {
  if (vector) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      int64_t i = base + r * 128 + lane * run;
      float4 pv = *reinterpret_cast<const float4*>(p + i);
      float4 gv = __ldcs(reinterpret_cast<const float4*>(g + i));  // read once: evict first
      d.p[r * run + 0] = pv.x, d.p[r * run + 1] = pv.y, d.p[r * run + 2] = pv.z, d.p[r * run + 3] = pv.w;
      d.g[r * run + 0] = gv.x, d.g[r * run + 1] = gv.y, d.g[r * run + 2] = gv.z, d.g[r * run + 3] = gv.w;
      d.m_codes[r] = *reinterpret_cast<const uint32_t*>(m_codes + i);
      d.v_codes[r] = *reinterpret_cast<const uint32_t*>(v_codes + i);
    }
    return;
  }
  d.m_codes[0] = d.m_codes[1] = d.v_codes[0] = d.v_codes[1] = 0;
#pragma unroll
  for (int j = 0; j < per_lane; ++j) {
    int64_t i = base + element_in_block(lane, j);
    bool valid = i < n;
    d.p[j] = valid ? p[i] : 0.0f;
    d.g[j] = valid ? g[i] : 0.0f;
    if (valid) {
      d.m_codes[j / run] |= uint32_t(m_codes[i]) << (8 * (j % run));
      d.v_codes[j / run] |= uint32_t(v_codes[i]) << (8 * (j % run));
    }
  }
}

// Stores what load_lane loaded, the same way (elements past n are not written).
__device__ __forceinline__ void store_lane(const LaneData& d, float* p, uint8_t* m_codes, uint8_t* v_codes,
                                           int64_t base, int64_t n, int lane, bool vector) {
  if (vector) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      int64_t i = base + r * 128 + lane * run;
      *reinterpret_cast<float4*>(p + i) = make_float4(d.p[r * run], d.p[r * run + 1], d.p[r * run + 2], d.p[r * run + 3]);
      *reinterpret_cast<uint32_t*>(m_codes + i) = d.m_codes[r];
      *reinterpret_cast<uint32_t*>(v_codes + i) = d.v_codes[r];
    }
    return;
  }
#pragma unroll
  for (int j = 0; j < per_lane; ++j) {
    int64_t i = base + element_in_block(lane, j);
    if (i < n) {
      p[i] = d.p[j];
      m_codes[i] = static_cast<uint8_t>(d.m_codes[j / run] >> (8 * (j % run)));
      v_codes[i] = static_cast<uint8_t>(d.v_codes[j / run] >> (8 * (j % run)));
    }
  }
}

__global__ void __launch_bounds__(threads_8bit)
    adamw8bit_kernel(float* p, const float* g, uint8_t* m_codes, uint8_t* v_codes, float* absmax_m, float* absmax_v,
                     const float* maps, int64_t n, om::AdamScalars s, bool vector_io, int64_t* counter) {
  __shared__ float signed_map[256], unsigned_map[256];    // dequantization: map[code]
  __shared__ float signed_tree[256], unsigned_tree[256];  // the search (entries 0..254)
  __shared__ int warp_bad[warps_8bit];
  const int t = threadIdx.x;
  signed_map[t] = maps[t];
  unsigned_map[t] = maps[256 + t];
  if (t < 255) {
    int index = om::search_tree_map_index(t);
    signed_tree[t] = maps[index];
    unsigned_tree[t] = maps[256 + index];
  }
  const float signed_last = maps[255], unsigned_last = maps[511];
  __syncthreads();

  const int lane = t & 31, warp = t >> 5;
  const int64_t n_blocks = (n + quant_block - 1) / quant_block;
  const int64_t n_full_blocks = n / quant_block;
  int bad = 0;
  for (int64_t b = int64_t(blockIdx.x) * warps_8bit + warp; b < n_blocks; b += int64_t(gridDim.x) * warps_8bit) {
    const int64_t base = b * quant_block;
    const bool vector = vector_io && b < n_full_blocks;  // warp-uniform
    LaneData d;
    load_lane(d, p, g, m_codes, v_codes, base, n, lane, vector);
    const float old_absmax_m = absmax_m[b], old_absmax_v = absmax_v[b];

    // 1. dequantize with the old absmax, update m and v in f32, the block's new absmax
    float m[per_lane], v[per_lane];
    unsigned ok = 0;
    float local_m = 0.0f, local_v = 0.0f;
#pragma unroll
    for (int j = 0; j < per_lane; ++j) {
      m[j] = om::mul_rn(signed_map[(d.m_codes[j / run] >> (8 * (j % run))) & 0xff], old_absmax_m);
      v[j] = om::mul_rn(unsigned_map[(d.v_codes[j / run] >> (8 * (j % run))) & 0xff], old_absmax_v);
      bool valid = vector || base + element_in_block(lane, j) < n;
      if (valid) {
        if (om::adam8bit_moments(d.g[j], m[j], v[j], s)) ok |= 1u << j;
        else ++bad;
      } else {
        m[j] = v[j] = 0.0f;  // padding: 0 is the identity of a max of |x|
      }
      local_m = fmaxf(local_m, fabsf(m[j]));
      local_v = fmaxf(local_v, fabsf(v[j]));
    }
    // Every lane has read absmax_*[b] before its value enters the shuffles: lane 0 may overwrite it.
    const float new_absmax_m = warp_max(local_m), new_absmax_v = warp_max(local_v);
    if (lane == 0) {
      absmax_m[b] = new_absmax_m;
      absmax_v[b] = new_absmax_v;
    }

    // 2. parameter update (bias-corrected, decay after), 3. requantize
    d.m_codes[0] = d.m_codes[1] = d.v_codes[0] = d.v_codes[1] = 0;
#pragma unroll
    for (int j = 0; j < per_lane; ++j) {
      if (ok & (1u << j)) d.p[j] = om::adam8bit_param(d.p[j], m[j], v[j], s);
      uint32_t mc = om::requantize_tree(signed_tree, signed_last, m[j], new_absmax_m, true);
      uint32_t vc = om::requantize_tree(unsigned_tree, unsigned_last, v[j], new_absmax_v, false);
      d.m_codes[j / run] |= mc << (8 * (j % run));
      d.v_codes[j / run] |= vc << (8 * (j % run));
    }
    store_lane(d, p, m_codes, v_codes, base, n, lane, vector);
  }

  // skipped elements: a warp sum, then one atomic per CUDA block
  for (int offset = 16; offset > 0; offset >>= 1) bad += __shfl_xor_sync(0xffffffffu, bad, offset);
  if (lane == 0) warp_bad[warp] = bad;
  __syncthreads();
  if (t == 0) {
    int total = 0;
#pragma unroll
    for (int w = 0; w < warps_8bit; ++w) total += warp_bad[w];
    if (total != 0)
      atomicAdd(reinterpret_cast<unsigned long long*>(counter), static_cast<unsigned long long>(total));
  }
}

// out[r] = sum of g[r*256 + j]^2 over j < 256, one warp per row: lane l adds the squares of
// elements l, l + 32, ..., l + 224 to 0 in that order, then a butterfly over the warp; the
// additions reduce() makes over rows of 256 of square(g) (runtime/cuda/reduce.cu).
__global__ void row_sums_of_squares_kernel(const float* g, int64_t n_rows, float* out) {
  int64_t r = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (r >= n_rows) return;  // whole warps only
  const float* row = g + r * quant_block;
  int lane = threadIdx.x & 31;
  float x[quant_block / 32];
#pragma unroll
  for (int j = 0; j < quant_block / 32; ++j) x[j] = __ldcs(row + lane + 32 * j);
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < quant_block / 32; ++j) sum = __fadd_rn(sum, __fmul_rn(x[j], x[j]));
  for (int offset = 16; offset > 0; offset >>= 1) sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, offset));
  if (lane == 0) out[r] = sum;
}

// g[i] = g[i] * c; 16-byte accesses when `vector` (g 16-byte aligned).
__global__ void scale_kernel(float* g, int64_t n, float c, bool vector) {
  int64_t stride = int64_t(gridDim.x) * blockDim.x;
  int64_t n4 = vector ? n / 4 : 0;
  float4* g4 = reinterpret_cast<float4*>(g);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n4; i += stride) {
    float4 x = g4[i];
    g4[i] = make_float4(__fmul_rn(x.x, c), __fmul_rn(x.y, c), __fmul_rn(x.z, c), __fmul_rn(x.w, c));
  }
  for (int64_t i = 4 * n4 + blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += stride) g[i] = __fmul_rn(g[i], c);
}

// Blocks of the 8-bit kernel resident on the current device at once (cached per device).
unsigned resident_8bit_blocks() {
  static std::atomic<int> cached[64];
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  int blocks = device < 64 ? cached[device].load() : 0;
  if (blocks == 0) {
    int sms = 0, per_sm = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, adamw8bit_kernel, threads_8bit, 0));
    blocks = sms * (per_sm > 0 ? per_sm : 1);
    if (device < 64) cached[device].store(blocks);
  }
  return static_cast<unsigned>(blocks);
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
  auto misaligned = [](const void* ptr, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes != 0; };
  bool vector_io = !(misaligned(p, 16) || misaligned(g, 16) || misaligned(m_codes, 4) || misaligned(v_codes, 4));
  int64_t n_blocks = (n + quant_block - 1) / quant_block;
  int64_t needed = (n_blocks + warps_8bit - 1) / warps_8bit;
  int64_t resident = resident_8bit_blocks();
  unsigned grid = static_cast<unsigned>(needed < resident ? needed : resident);
  adamw8bit_kernel<<<grid, threads_8bit, 0, static_cast<cudaStream_t>(stream)>>>(
      p, g, m_codes, v_codes, absmax_m, absmax_v, maps, n, s, vector_io, n_nonfinite);
  CUDA_CHECK_LAUNCH();
}

void row_sums_of_squares(const float* g, int64_t n_rows, float* out, void* stream) {
  if (n_rows == 0) return;
  constexpr int rows_per_block = block_size / 32;
  unsigned grid = static_cast<unsigned>((n_rows + rows_per_block - 1) / rows_per_block);
  row_sums_of_squares_kernel<<<grid, block_size, 0, static_cast<cudaStream_t>(stream)>>>(g, n_rows, out);
  CUDA_CHECK_LAUNCH();
}

void scale(float* g, int64_t n, float c, void* stream) {
  if (n == 0) return;
  bool vector = reinterpret_cast<uintptr_t>(g) % 16 == 0;
  scale_kernel<<<grid_for((n + 3) / 4), block_size, 0, static_cast<cudaStream_t>(stream)>>>(g, n, c, vector);
  CUDA_CHECK_LAUNCH();
}

}  // namespace wick::cuda
