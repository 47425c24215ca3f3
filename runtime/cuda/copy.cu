// Strided copies and dtype casts. The views arrive coalesced (runtime/ops/copy.cpp), so the last
// axis is the longest run; three kernels:
//   flat:      both sides dense: a cast in vectors of up to 16 bytes (same dtype: cudaMemcpyAsync)
//   rows:      the last axis walked by consecutive threads on both sides (broadcasts, slices, head
//              permutes that keep the last axis): one offset computation per row, not per element
//   transpose: the source's unit-stride axis is another one (x.T, moving an axis last): 32x32 tiles
//              through shared memory so that reads and writes are both coalesced
#include <algorithm>

#include "runtime/cuda/copy.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/launch.cuh"

namespace wick::cuda {
namespace {

// ---- kernels ----
template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T values[N];
};

// Elements per vector: 16 bytes of the wider side.
template <typename D, typename S>
constexpr int pack_size() {
  constexpr int widest = sizeof(D) > sizeof(S) ? static_cast<int>(sizeof(D)) : static_cast<int>(sizeof(S));
  return widest >= 16 ? 1 : 16 / widest;
}

template <typename D, typename S>
__global__ void copy_flat_kernel(D* dst, const S* src, int64_t n) {
  constexpr int N = pack_size<D, S>();
  int64_t n_packs = n / N;
  int64_t stride = int64_t(gridDim.x) * blockDim.x;
  int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  for (int64_t p = first; p < n_packs; p += stride) {
    Pack<S, N> in = reinterpret_cast<const Pack<S, N>*>(src)[p];
    Pack<D, N> out;
#pragma unroll
    for (int j = 0; j < N; ++j) out.values[j] = convert<D>(in.values[j]);
    reinterpret_cast<Pack<D, N>*>(dst)[p] = out;
  }
  for (int64_t i = n_packs * N + first; i < n; i += stride) dst[i] = convert<D>(src[i]);
}

template <typename D, typename S>
__global__ void copy_flat_scalar_kernel(D* dst, const S* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = convert<D>(src[i]);
}

// outer views: every axis but the last; row r starts at outer.offset_of(r) on each side.
template <typename D, typename S>
__global__ void copy_rows_kernel(D* dst, StridedView dst_outer, int64_t dst_step, const S* src, StridedView src_outer,
                                 int64_t src_step, int64_t n_rows, int64_t inner) {
  for (int64_t row = blockIdx.y * int64_t(blockDim.y) + threadIdx.y; row < n_rows;
       row += int64_t(gridDim.y) * blockDim.y) {
    D* d = dst + dst_outer.offset_of(row);
    const S* s = src + src_outer.offset_of(row);
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < inner; i += int64_t(gridDim.x) * blockDim.x)
      d[i * dst_step] = convert<D>(s[i * src_step]);
  }
}

constexpr int tile = 32;
constexpr int tile_rows = 8;

// A [rows, cols] plane per batch index: the source reads unit stride along rows, the destination
// writes unit stride along cols. Blocks are (32, 8) threads.
template <typename D, typename S>
__global__ void copy_transpose_kernel(D* dst, StridedView dst_batch, int64_t dst_row_stride, const S* src,
                                      StridedView src_batch, int64_t src_col_stride, int64_t rows, int64_t cols,
                                      int64_t n_batch) {
  __shared__ S cell[tile][tile + 1];
  int64_t r0 = int64_t(blockIdx.y) * tile, c0 = int64_t(blockIdx.x) * tile;
  for (int64_t b = blockIdx.z; b < n_batch; b += gridDim.z) {
    const S* s = src + src_batch.offset_of(b);
    D* d = dst + dst_batch.offset_of(b);
    for (int j = threadIdx.y; j < tile; j += tile_rows) {
      int64_t r = r0 + threadIdx.x, c = c0 + j;
      if (r < rows && c < cols) cell[j][threadIdx.x] = s[r + c * src_col_stride];
    }
    __syncthreads();
    for (int j = threadIdx.y; j < tile; j += tile_rows) {
      int64_t r = r0 + j, c = c0 + threadIdx.x;
      if (r < rows && c < cols) d[r * dst_row_stride + c] = convert<D>(cell[threadIdx.x][j]);
    }
    __syncthreads();
  }
}

// ---- launch helpers ----
StridedView without_axes(const StridedView& view, int first, int second) {
  StridedView out;
  for (int a = 0; a < view.rank; ++a) {
    if (a == first || a == second) continue;
    out.shape[out.rank] = view.shape[a];
    out.strides[out.rank] = view.strides[a];
    ++out.rank;
  }
  return out;
}

unsigned capped(int64_t blocks, int64_t cap) { return static_cast<unsigned>(std::max<int64_t>(1, std::min(blocks, cap))); }

template <typename D, typename S>
void launch_flat(D* dst, const S* src, int64_t n, cudaStream_t s) {
  constexpr int N = pack_size<D, S>();
  bool aligned = reinterpret_cast<uintptr_t>(dst) % (sizeof(D) * N) == 0 &&
                 reinterpret_cast<uintptr_t>(src) % (sizeof(S) * N) == 0;
  if (N > 1 && aligned)
    copy_flat_kernel<D, S><<<grid_for((n + N - 1) / N), block_size, 0, s>>>(dst, src, n);
  else
    copy_flat_scalar_kernel<D, S><<<grid_for(n), block_size, 0, s>>>(dst, src, n);
  CUDA_CHECK_LAUNCH();
}

// The transposing kernel when the destination's last axis is dense and the source's dense axis is
// another one; returns false when the problem is not of that kind.
template <typename D, typename S>
bool launch_transpose(D* dst, const StridedView& dv, const S* src, const StridedView& sv, int64_t n, cudaStream_t s) {
  int last = dv.rank - 1;
  if (dv.rank < 2 || dv.strides[last] != 1 || sv.strides[last] == 1) return false;
  int p = -1;
  for (int a = last - 1; a >= 0 && p < 0; --a)
    if (sv.strides[a] == 1 && sv.shape[a] > 1) p = a;
  if (p < 0) return false;
  int64_t rows = dv.shape[p], cols = dv.shape[last];
  int64_t row_tiles = (rows + tile - 1) / tile, col_tiles = (cols + tile - 1) / tile;
  if (row_tiles > 65535 || col_tiles > (int64_t{1} << 31) - 1) return false;
  int64_t n_batch = n / (rows * cols);
  dim3 grid(static_cast<unsigned>(col_tiles), static_cast<unsigned>(row_tiles), capped(n_batch, 65535));
  copy_transpose_kernel<D, S><<<grid, dim3(tile, tile_rows), 0, s>>>(
      dst, without_axes(dv, p, last), dv.strides[p], src, without_axes(sv, p, last), sv.strides[last], rows, cols,
      n_batch);
  CUDA_CHECK_LAUNCH();
  return true;
}

template <typename D, typename S>
void launch_rows(D* dst, const StridedView& dv, const S* src, const StridedView& sv, int64_t n, cudaStream_t s) {
  int last = dv.rank - 1;
  int64_t inner = dv.rank == 0 ? 1 : dv.shape[last];
  int64_t n_rows = n / std::max<int64_t>(inner, 1);
  int threads_x = 32;
  while (threads_x < block_size && threads_x < inner) threads_x *= 2;
  int threads_y = block_size / threads_x;
  dim3 block(threads_x, threads_y);
  dim3 grid(capped((inner + threads_x - 1) / threads_x, 65535),
            capped((n_rows + threads_y - 1) / threads_y, 65535));
  StridedView dst_outer = dv.rank == 0 ? dv : without_axes(dv, last, last);
  StridedView src_outer = sv.rank == 0 ? sv : without_axes(sv, last, last);
  int64_t dst_step = dv.rank == 0 ? 0 : dv.strides[last], src_step = sv.rank == 0 ? 0 : sv.strides[last];
  copy_rows_kernel<D, S><<<grid, block, 0, s>>>(dst, dst_outer, dst_step, src, src_outer, src_step, n_rows, inner);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

// ---- launchers ----
void copy_strided(void* dst, DType dst_dtype, const StridedView& dst_view, const void* src, DType src_dtype,
                  const StridedView& src_view, int64_t n, void* stream) {
  if (n == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  bool dst_flat = dst_view.rank <= 1 && (dst_view.rank == 0 || dst_view.strides[0] == 1);
  bool src_flat = src_view.rank <= 1 && (src_view.rank == 0 || src_view.strides[0] == 1);
  if (dst_flat && src_flat && dst_dtype == src_dtype) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, n * dtype_size(dst_dtype), cudaMemcpyDeviceToDevice, s));
    return;
  }
  dispatch_dtype(dst_dtype, [&](auto dst_tag) {
    using D = decltype(dst_tag);
    dispatch_dtype(src_dtype, [&](auto src_tag) {
      using S = decltype(src_tag);
      D* d = static_cast<D*>(dst);
      const S* from = static_cast<const S*>(src);
      if (dst_flat && src_flat)
        launch_flat(d, from, n, s);
      else if (!launch_transpose(d, dst_view, from, src_view, n, s))
        launch_rows(d, dst_view, from, src_view, n, s);
    });
  });
}

}  // namespace wick::cuda
