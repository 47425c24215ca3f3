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

// ---- gradients ----

namespace {

// Both kernels put one warp on one row (a query row for dQ, a key row for dK/dV), rows_per_block
// rows per block sharing tiles of tile_rows rows of the other side staged in shared memory. In the
// score phase lane j owns one row of the tile; in the accumulation phase lane e owns features
// e, e + 32, ... (value_chunks of them). No atomics: each output element is summed by one lane in a
// fixed order, so results are bitwise reproducible. (rows_per_block, value_chunks and exp_of: the
// forward's, above.)
inline constexpr int tile_rows = 32;

template <typename A, typename T>
__device__ __forceinline__ A load(const T* at) {
  return static_cast<A>(static_cast<compute_t<T>>(*at));
}

template <typename A>
__device__ __forceinline__ A dot_of(const A* x, const A* y, int64_t n) {
  A acc = 0;
  for (int64_t e = 0; e < n; ++e) acc += x[e] * y[e];
  return acc;
}

// Score of query i, key j with the mask applied (-inf when dropped); the causal test is the caller's.
// mask_kind: 0 none, 1 U8 keep-mask, 2 additive mask of type A.
template <typename A>
__device__ __forceinline__ A masked_score(A dot, A scale, const void* mask, int mask_kind, const int64_t* ms,
                                          int64_t b, int64_t h, int64_t i, int64_t j) {
  A score = dot * scale;
  if (mask_kind == 0) return score;
  const int64_t at = b * ms[0] + h * ms[1] + i * ms[2] + j * ms[3];
  if (mask_kind == 1) return static_cast<const uint8_t*>(mask)[at] == 0 ? A(-INFINITY) : score;
  return score + static_cast<const A*>(mask)[at];
}

// P_ij from the score and the row's logsumexp; 0 for dropped keys and for rows that keep nothing.
template <typename A>
__device__ __forceinline__ A probability(A score, A lse) {
  return (score == A(-INFINITY) || lse == A(-INFINITY)) ? A(0) : exp_of(score - lse);
}

// ---- kernels ----
// dQ_i = scale * sum_j P_ij (dP_ij - D_i) k_j, one warp per query row i; also writes D_i.
template <typename T, typename A>
__global__ void attention_grad_q_kernel(const T* grad_out, const T* q, const T* k, const T* v, const T* out,
                                        const A* logsumexp, const void* mask, int mask_kind,
                                        AttentionBackwardDims bd, bool causal, A scale, A* row_dot, T* grad_q) {
  extern __shared__ unsigned char shared_raw[];
  const AttentionDims& dims = bd.forward;
  const int64_t d = dims.head_dim, dv = dims.value_dim, n_q = dims.n_queries, n_k = dims.n_keys;
  A* k_tile = reinterpret_cast<A*>(shared_raw);  // [tile_rows][d + 1] (padded against bank conflicts)
  A* v_tile = k_tile + tile_rows * (d + 1);       // [tile_rows][dv + 1]
  A* q_rows = v_tile + tile_rows * (dv + 1);      // [rows_per_block][d]
  A* go_rows = q_rows + rows_per_block * d;       // [rows_per_block][dv]

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t n_row_blocks = (n_q + rows_per_block - 1) / rows_per_block;
  const int64_t bh = blockIdx.x / n_row_blocks, row0 = (blockIdx.x % n_row_blocks) * rows_per_block;
  const int64_t b = bh / dims.heads, h = bh % dims.heads;
  const int64_t row = row0 + warp;
  const bool active = row < n_q;

  A* q_row = q_rows + warp * d;
  A* go_row = go_rows + warp * dv;
  A lse = 0, dot_o = 0;
  if (active) {
    const T* q_at = q + b * dims.q_strides[0] + h * dims.q_strides[1] + row * dims.q_strides[2];
    const T* go_at = grad_out + b * bd.grad_out_strides[0] + h * bd.grad_out_strides[1] + row * bd.grad_out_strides[2];
    const T* o_at = out + b * bd.out_strides[0] + h * bd.out_strides[1] + row * bd.out_strides[2];
    for (int64_t e = lane; e < d; e += 32) q_row[e] = load<A>(q_at + e * dims.q_strides[3]);
    A partial = 0;
    for (int64_t e = lane; e < dv; e += 32) {
      A g = load<A>(go_at + e * bd.grad_out_strides[3]);
      go_row[e] = g;
      partial += g * load<A>(o_at + e * bd.out_strides[3]);
    }
    dot_o = warp_sum(partial);
    lse = logsumexp[bh * n_q + row];
    if (lane == 0) row_dot[bh * n_q + row] = dot_o;
  }
  const T* k_head = k + b * dims.k_strides[0] + h * dims.k_strides[1];
  const T* v_head = v + b * dims.v_strides[0] + h * dims.v_strides[1];

  int64_t key_end = n_k;  // causal: keys past the block's last row are dropped for all its rows
  if (causal) {
    int64_t last_row = row0 + rows_per_block - 1 < n_q - 1 ? row0 + rows_per_block - 1 : n_q - 1;
    key_end = last_row + 1 < n_k ? last_row + 1 : n_k;
  }
  A acc[value_chunks];
#pragma unroll
  for (int c = 0; c < value_chunks; ++c) acc[c] = 0;

  for (int64_t tile0 = 0; tile0 < key_end; tile0 += tile_rows) {
    const int64_t n_tile = key_end - tile0 < tile_rows ? key_end - tile0 : tile_rows;
    __syncthreads();  // the previous tile is consumed (and the rows written on the first pass)
    for (int64_t x = threadIdx.x; x < n_tile * d; x += blockDim.x) {
      int64_t j = x / d, e = x % d;
      k_tile[j * (d + 1) + e] = load<A>(k_head + (tile0 + j) * dims.k_strides[2] + e * dims.k_strides[3]);
    }
    for (int64_t x = threadIdx.x; x < n_tile * dv; x += blockDim.x) {
      int64_t j = x / dv, e = x % dv;
      v_tile[j * (dv + 1) + e] = load<A>(v_head + (tile0 + j) * dims.v_strides[2] + e * dims.v_strides[3]);
    }
    __syncthreads();
    if (!active) continue;  // whole warp

    const int64_t key = tile0 + lane;
    A ds = 0;
    if (lane < n_tile && !(causal && key > row)) {
      A score = masked_score(dot_of(q_row, k_tile + lane * (d + 1), d), scale, mask, mask_kind, dims.mask_strides, b,
                             h, row, key);
      A p = probability(score, lse);
      if (p != A(0)) ds = p * (dot_of(go_row, v_tile + lane * (dv + 1), dv) - dot_o);
    }
    for (int j = 0; j < n_tile; ++j) {
      const A ds_j = __shfl_sync(0xffffffffu, ds, j);
      const A* k_row = k_tile + j * (d + 1);
#pragma unroll
      for (int c = 0; c < value_chunks; ++c) {
        int64_t e = lane + 32 * c;
        if (e < d) acc[c] += ds_j * k_row[e];
      }
    }
  }
  if (!active) return;
  T* grad_row = grad_q + (bh * n_q + row) * d;
#pragma unroll
  for (int c = 0; c < value_chunks; ++c) {
    int64_t e = lane + 32 * c;
    if (e < d) grad_row[e] = convert<T>(acc[c] * scale);
  }
}

// dV_j = sum_i P_ij dO_i and dK_j = scale * sum_i P_ij (dP_ij - D_i) q_i, one warp per key row j.
template <typename T, typename A>
__global__ void attention_grad_kv_kernel(const T* grad_out, const T* q, const T* k, const T* v, const A* logsumexp,
                                         const void* mask, int mask_kind, AttentionBackwardDims bd, bool causal,
                                         A scale, const A* row_dot, T* grad_k, T* grad_v) {
  extern __shared__ unsigned char shared_raw[];
  const AttentionDims& dims = bd.forward;
  const int64_t d = dims.head_dim, dv = dims.value_dim, n_q = dims.n_queries, n_k = dims.n_keys;
  A* q_tile = reinterpret_cast<A*>(shared_raw);  // [tile_rows][d + 1]
  A* go_tile = q_tile + tile_rows * (d + 1);      // [tile_rows][dv + 1]
  A* lse_tile = go_tile + tile_rows * (dv + 1);   // [tile_rows]
  A* dot_tile = lse_tile + tile_rows;             // [tile_rows]
  A* k_rows = dot_tile + tile_rows;               // [rows_per_block][d]
  A* v_rows = k_rows + rows_per_block * d;        // [rows_per_block][dv]

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t n_key_blocks = (n_k + rows_per_block - 1) / rows_per_block;
  const int64_t bh = blockIdx.x / n_key_blocks, key0 = (blockIdx.x % n_key_blocks) * rows_per_block;
  const int64_t b = bh / dims.heads, h = bh % dims.heads;
  const int64_t key = key0 + warp;
  const bool active = key < n_k;

  A* k_row = k_rows + warp * d;
  A* v_row = v_rows + warp * dv;
  if (active) {
    const T* k_at = k + b * dims.k_strides[0] + h * dims.k_strides[1] + key * dims.k_strides[2];
    const T* v_at = v + b * dims.v_strides[0] + h * dims.v_strides[1] + key * dims.v_strides[2];
    for (int64_t e = lane; e < d; e += 32) k_row[e] = load<A>(k_at + e * dims.k_strides[3]);
    for (int64_t e = lane; e < dv; e += 32) v_row[e] = load<A>(v_at + e * dims.v_strides[3]);
  }
  const T* q_head = q + b * dims.q_strides[0] + h * dims.q_strides[1];
  const T* go_head = grad_out + b * bd.grad_out_strides[0] + h * bd.grad_out_strides[1];

  // causal: queries before the block's first key drop every key of the block.
  const int64_t query_begin = causal ? (key0 < n_q ? key0 : n_q) : 0;
  A acc_k[value_chunks], acc_v[value_chunks];
#pragma unroll
  for (int c = 0; c < value_chunks; ++c) acc_k[c] = acc_v[c] = 0;

  for (int64_t tile0 = query_begin; tile0 < n_q; tile0 += tile_rows) {
    const int64_t n_tile = n_q - tile0 < tile_rows ? n_q - tile0 : tile_rows;
    __syncthreads();
    for (int64_t x = threadIdx.x; x < n_tile * d; x += blockDim.x) {
      int64_t i = x / d, e = x % d;
      q_tile[i * (d + 1) + e] = load<A>(q_head + (tile0 + i) * dims.q_strides[2] + e * dims.q_strides[3]);
    }
    for (int64_t x = threadIdx.x; x < n_tile * dv; x += blockDim.x) {
      int64_t i = x / dv, e = x % dv;
      go_tile[i * (dv + 1) + e] =
          load<A>(go_head + (tile0 + i) * bd.grad_out_strides[2] + e * bd.grad_out_strides[3]);
    }
    for (int64_t i = threadIdx.x; i < n_tile; i += blockDim.x) {
      lse_tile[i] = logsumexp[bh * n_q + tile0 + i];
      dot_tile[i] = row_dot[bh * n_q + tile0 + i];
    }
    __syncthreads();
    if (!active) continue;

    const int64_t query = tile0 + lane;
    A p = 0, ds = 0;
    if (lane < n_tile && !(causal && key > query)) {
      A score = masked_score(dot_of(q_tile + lane * (d + 1), k_row, d), scale, mask, mask_kind, dims.mask_strides, b,
                             h, query, key);
      p = probability(score, lse_tile[lane]);
      if (p != A(0)) ds = p * (dot_of(go_tile + lane * (dv + 1), v_row, dv) - dot_tile[lane]);
    }
    for (int i = 0; i < n_tile; ++i) {
      const A p_i = __shfl_sync(0xffffffffu, p, i);
      const A ds_i = __shfl_sync(0xffffffffu, ds, i);
      const A* q_at = q_tile + i * (d + 1);
      const A* go_at = go_tile + i * (dv + 1);
#pragma unroll
      for (int c = 0; c < value_chunks; ++c) {
        int64_t e = lane + 32 * c;
        if (e < d) acc_k[c] += ds_i * q_at[e];
        if (e < dv) acc_v[c] += p_i * go_at[e];
      }
    }
  }
  if (!active) return;
  T* grad_k_row = grad_k + (bh * n_k + key) * d;
  T* grad_v_row = grad_v + (bh * n_k + key) * dv;
#pragma unroll
  for (int c = 0; c < value_chunks; ++c) {
    int64_t e = lane + 32 * c;
    if (e < d) grad_k_row[e] = convert<T>(acc_k[c] * scale);
    if (e < dv) grad_v_row[e] = convert<T>(acc_v[c]);
  }
}

template <typename Kernel>
void allow_shared(Kernel kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

}  // namespace

// ---- launchers ----
void attention_backward(DType dtype, const void* grad_out, const void* q, const void* k, const void* v,
                        const void* out, const void* logsumexp, const void* mask, DType mask_dtype,
                        const AttentionBackwardDims& dims, bool causal, double scale, void* row_dot, void* grad_q,
                        void* grad_k, void* grad_v, void* stream) {
  const AttentionDims& f = dims.forward;
  const int64_t heads = f.batch * f.heads;
  const int64_t q_blocks = heads * ((f.n_queries + rows_per_block - 1) / rows_per_block);
  const int64_t kv_blocks = heads * ((f.n_keys + rows_per_block - 1) / rows_per_block);
  auto s = static_cast<cudaStream_t>(stream);
  const int mask_kind = mask == nullptr ? 0 : (mask_dtype == DType::U8 ? 1 : 2);
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<compute_t<T>>) {
      using A = compute_t<T>;
      const size_t tiles = static_cast<size_t>(tile_rows * (f.head_dim + 1) + tile_rows * (f.value_dim + 1));
      const size_t rows = static_cast<size_t>(rows_per_block * (f.head_dim + f.value_dim));
      if (q_blocks > 0) {  // grad_q, and D_i for the second kernel (which runs after it on the stream)
        const size_t bytes = sizeof(A) * (tiles + rows);
        auto kernel = attention_grad_q_kernel<T, A>;
        allow_shared(kernel, bytes);
        kernel<<<static_cast<unsigned>(q_blocks), rows_per_block * 32, bytes, s>>>(
            static_cast<const T*>(grad_out), static_cast<const T*>(q), static_cast<const T*>(k),
            static_cast<const T*>(v), static_cast<const T*>(out), static_cast<const A*>(logsumexp), mask, mask_kind,
            dims, causal, static_cast<A>(scale), static_cast<A*>(row_dot), static_cast<T*>(grad_q));
        CUDA_CHECK_LAUNCH();
      }
      if (kv_blocks > 0) {
        const size_t bytes = sizeof(A) * (tiles + 2 * tile_rows + rows);
        auto kernel = attention_grad_kv_kernel<T, A>;
        allow_shared(kernel, bytes);
        kernel<<<static_cast<unsigned>(kv_blocks), rows_per_block * 32, bytes, s>>>(
            static_cast<const T*>(grad_out), static_cast<const T*>(q), static_cast<const T*>(k),
            static_cast<const T*>(v), static_cast<const A*>(logsumexp), mask, mask_kind, dims, causal,
            static_cast<A>(scale), static_cast<const A*>(row_dot), static_cast<T*>(grad_k), static_cast<T*>(grad_v));
        CUDA_CHECK_LAUNCH();
      }
    }
  });
}
}  // namespace wick::cuda
