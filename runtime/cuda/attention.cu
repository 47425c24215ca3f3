#include <math.h>

#include "runtime/cuda/attention.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/warp_reduce.cuh"
#include "runtime/kernel_args.h"

namespace wick::cuda {
namespace {

// One warp per query row, rows_per_block rows per block sharing tiles of key_tile keys (and their
// values) staged in shared memory; online softmax over the tiles, accumulation in A.
inline constexpr int rows_per_block = 8;
inline constexpr int key_tile = 32;
inline constexpr int value_chunks = static_cast<int>(attention_kernel_max_head_dim / 32);

__device__ __forceinline__ float exp_of(float x) { return expf(x); }
__device__ __forceinline__ double exp_of(double x) { return exp(x); }
__device__ __forceinline__ float log_of(float x) { return logf(x); }
__device__ __forceinline__ double log_of(double x) { return log(x); }

// ---- kernels ----
// mask_kind: 0 none, 1 U8 keep-mask, 2 additive mask of type A.
template <typename T, typename A>
__global__ void attention_kernel(const T* q, const T* k, const T* v, const void* mask, int mask_kind,
                                 AttentionDims dims, bool causal, A scale, T* out, A* logsumexp) {
  extern __shared__ unsigned char shared_raw[];
  const int64_t d = dims.head_dim, dv = dims.value_dim, n_q = dims.n_queries, n_k = dims.n_keys;
  A* k_tile = reinterpret_cast<A*>(shared_raw);  // [key_tile][d + 1] (padded against bank conflicts)
  A* v_tile = k_tile + key_tile * (d + 1);       // [key_tile][dv]
  A* q_rows = v_tile + key_tile * dv;            // [rows_per_block][d]

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t n_row_blocks = (n_q + rows_per_block - 1) / rows_per_block;
  const int64_t bh = blockIdx.x / n_row_blocks, row0 = (blockIdx.x % n_row_blocks) * rows_per_block;
  const int64_t b = bh / dims.heads, h = bh % dims.heads;
  const int64_t row = row0 + warp;
  const bool active = row < n_q;

  A* q_row = q_rows + warp * d;
  if (active) {
    const T* q_at = q + b * dims.q_strides[0] + h * dims.q_strides[1] + row * dims.q_strides[2];
    for (int64_t i = lane; i < d; i += 32)
      q_row[i] = static_cast<A>(static_cast<compute_t<T>>(q_at[i * dims.q_strides[3]]));
  }
  const T* k_head = k + b * dims.k_strides[0] + h * dims.k_strides[1];
  const T* v_head = v + b * dims.v_strides[0] + h * dims.v_strides[1];
  const int64_t mask_base = b * dims.mask_strides[0] + h * dims.mask_strides[1] + row * dims.mask_strides[2];

  // Keys past the block's last row are all dropped under a causal mask: skip their tiles.
  int64_t key_end = n_k;
  if (causal) {
    int64_t last_row = row0 + rows_per_block - 1 < n_q - 1 ? row0 + rows_per_block - 1 : n_q - 1;
    key_end = last_row + 1 < n_k ? last_row + 1 : n_k;
  }
  const A minus_inf = -INFINITY;
  A running_max = minus_inf, running_sum = 0;
  A acc[value_chunks];
#pragma unroll
  for (int c = 0; c < value_chunks; ++c) acc[c] = 0;

  for (int64_t tile0 = 0; tile0 < key_end; tile0 += key_tile) {
    const int64_t n_tile = key_end - tile0 < key_tile ? key_end - tile0 : key_tile;
    __syncthreads();  // the previous tile is consumed (and q_rows written on the first pass)
    for (int64_t i = threadIdx.x; i < n_tile * d; i += blockDim.x) {
      int64_t j = i / d, e = i % d;
      k_tile[j * (d + 1) + e] =
          static_cast<A>(static_cast<compute_t<T>>(k_head[(tile0 + j) * dims.k_strides[2] + e * dims.k_strides[3]]));
    }
    for (int64_t i = threadIdx.x; i < n_tile * dv; i += blockDim.x) {
      int64_t j = i / dv, e = i % dv;
      v_tile[j * dv + e] =
          static_cast<A>(static_cast<compute_t<T>>(v_head[(tile0 + j) * dims.v_strides[2] + e * dims.v_strides[3]]));
    }
    __syncthreads();
    if (!active) continue;  // whole warp: rows are per warp

    const int64_t key = tile0 + lane;
    A score = minus_inf;
    if (lane < n_tile && !(causal && key > row)) {
      A dot = 0;
      const A* k_row = k_tile + lane * (d + 1);
      for (int64_t e = 0; e < d; ++e) dot += q_row[e] * k_row[e];
      score = dot * scale;
      if (mask_kind == 1) {
        if (static_cast<const uint8_t*>(mask)[mask_base + key * dims.mask_strides[3]] == 0) score = minus_inf;
      } else if (mask_kind == 2) {
        score += static_cast<const A*>(mask)[mask_base + key * dims.mask_strides[3]];
      }
    }
    const A new_max = fmax(running_max, warp_max(score));
    if (new_max == minus_inf) continue;  // nothing kept so far (warp-uniform)
    const A correction = running_max == minus_inf ? A(0) : exp_of(running_max - new_max);
    const A p = score == minus_inf ? A(0) : exp_of(score - new_max);
    running_sum = running_sum * correction + warp_sum(p);
#pragma unroll
    for (int c = 0; c < value_chunks; ++c) acc[c] *= correction;
    for (int j = 0; j < n_tile; ++j) {
      const A p_j = __shfl_sync(0xffffffffu, p, j);
      const A* v_row = v_tile + j * dv;
#pragma unroll
      for (int c = 0; c < value_chunks; ++c) {
        int64_t e = lane + 32 * c;
        if (e < dv) acc[c] += p_j * v_row[e];
      }
    }
    running_max = new_max;
  }
  if (!active) return;
  const A inverse = running_sum > 0 ? A(1) / running_sum : A(0);
  T* out_row = out + (bh * n_q + row) * dv;
#pragma unroll
  for (int c = 0; c < value_chunks; ++c) {
    int64_t e = lane + 32 * c;
    if (e < dv) out_row[e] = convert<T>(acc[c] * inverse);
  }
  if (lane == 0) logsumexp[bh * n_q + row] = running_sum > 0 ? running_max + log_of(running_sum) : minus_inf;
}

}  // namespace

// ---- launchers ----
void attention_forward(DType dtype, const void* q, const void* k, const void* v, const void* mask, DType mask_dtype,
                       const AttentionDims& dims, bool causal, double scale, void* out, void* logsumexp, void* stream) {
  const int64_t n_row_blocks = (dims.n_queries + rows_per_block - 1) / rows_per_block;
  const int64_t n_blocks = dims.batch * dims.heads * n_row_blocks;
  if (n_blocks == 0 || dims.value_dim == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  const int mask_kind = mask == nullptr ? 0 : (mask_dtype == DType::U8 ? 1 : 2);
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<compute_t<T>>) {
      using A = compute_t<T>;
      size_t shared_bytes = sizeof(A) * static_cast<size_t>(key_tile * (dims.head_dim + 1) + key_tile * dims.value_dim +
                                                            rows_per_block * dims.head_dim);
      auto kernel = attention_kernel<T, A>;
      if (shared_bytes > 48 * 1024)
        CUDA_CHECK(
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared_bytes)));
      kernel<<<static_cast<unsigned>(n_blocks), rows_per_block * 32, shared_bytes, s>>>(
          static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), mask, mask_kind, dims, causal,
          static_cast<A>(scale), static_cast<T*>(out), static_cast<A*>(logsumexp));
      CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace wick::cuda
