#include "runtime/cpu/gemm_avx512.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
// GCC 12 reports its own _mm512_undefined_ps (self-initialized on purpose) inside the unpack and
// shuffle intrinsics as "may be used uninitialized" once they are inlined here; GCC 13 does not.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#endif

#include "runtime/cpu/cpu_features.h"
#include "runtime/cpu/matmul.h"
#include "runtime/cpu/parallel.h"
#include "runtime/error.h"

namespace wick::cpu {
namespace {

constexpr int64_t tile_rows = 14;  // 14 x 2 accumulators + 2 B vectors + 1 broadcast = 31 of 32 zmm
constexpr int64_t tile_cols = 32;
constexpr int64_t k_slice = 256;  // K summed in registers at a time (see run_tiles)

// What one call's tiles read and write. B is either `b` itself (row-major, b_step = ldb) or the packed
// panels (b_step = tile_cols, one panel of k x 32 after another).
struct Tiles {
  int64_t m = 0, n = 0, k = 0;
  const float* a = nullptr;
  int64_t lda = 0;
  bool a_transposed = false;
  const float* b = nullptr;
  int64_t b_step = 0, b_panel_step = 0;
  float* c = nullptr;
  int64_t ldc = 0;
  bool accumulate = false;
  const float* bias = nullptr;  // a row of n values added to every row of C
  float alpha = 1.0f;           // C = alpha * (A @ B) (+ C or bias)
  bool rows_outer = true;       // tile order: all column panels of a row block, then the next block
  int64_t row_blocks = 0, col_panels = 0;
};

#if defined(__x86_64__)
#define WICK_AVX512 __attribute__((target("avx512f")))

// One tile of R rows: the 2R accumulators live in registers over all of K. a points at the tile's
// first row (row r, step kk at a[r * lda + kk], or a[kk * lda + r] when A is transposed); b at the
// tile's first column of k = 0, the next k b_step floats on. mask0/mask1 select the valid columns of
// the tile's two 16-column halves (FULL: all 32, plain loads and stores). next_a (or null): the next row
// block's A, fetched into the cache a line per k step. The sums are scaled by alpha, then the bias row
// or C's old values added.
template <int R, bool AT, bool FULL>
WICK_AVX512 __attribute__((noinline)) void tile(const float* a, int64_t lda, const float* b, int64_t b_step, int64_t k,
                                                float* c, int64_t ldc, __mmask16 mask0, __mmask16 mask1,
                                                bool accumulate, const float* bias, const float* next_a,
                                                float alpha) {
  __m512 acc0[R], acc1[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm512_setzero_ps();
  for (int64_t kk = 0; kk < k; ++kk) {
    __m512 b0 = FULL ? _mm512_loadu_ps(b) : _mm512_maskz_loadu_ps(mask0, b);
    __m512 b1 = FULL ? _mm512_loadu_ps(b + 16) : _mm512_maskz_loadu_ps(mask1, b + 16);
    const float* ak = AT ? a + kk * lda : a + kk;
    if (!AT && next_a != nullptr) {
      int64_t line = kk / R;
      if (line * 16 < k) _mm_prefetch(reinterpret_cast<const char*>(next_a + (kk % R) * lda + line * 16), _MM_HINT_T0);
    }
    if (AT) {
      _mm_prefetch(reinterpret_cast<const char*>(ak + 8 * lda), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(b + 8 * b_step), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(b + 8 * b_step + 16), _MM_HINT_T0);
    }
    b += b_step;
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      __m512 x = _mm512_set1_ps(AT ? ak[r] : ak[r * lda]);
      acc0[r] = _mm512_fmadd_ps(x, b0, acc0[r]);
      acc1[r] = _mm512_fmadd_ps(x, b1, acc1[r]);
    }
  }
  if (alpha != 1.0f) {
    __m512 scale = _mm512_set1_ps(alpha);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      acc0[r] = _mm512_mul_ps(acc0[r], scale);
      acc1[r] = _mm512_mul_ps(acc1[r], scale);
    }
  }
  if (bias != nullptr) {
    __m512 bias0 = FULL ? _mm512_loadu_ps(bias) : _mm512_maskz_loadu_ps(mask0, bias);
    __m512 bias1 = FULL ? _mm512_loadu_ps(bias + 16) : _mm512_maskz_loadu_ps(mask1, bias + 16);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      acc0[r] = _mm512_add_ps(acc0[r], bias0);
      acc1[r] = _mm512_add_ps(acc1[r], bias1);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    float* row = c + r * ldc;
    if (FULL) {
      if (accumulate) {
        acc0[r] = _mm512_add_ps(_mm512_loadu_ps(row), acc0[r]);
        acc1[r] = _mm512_add_ps(_mm512_loadu_ps(row + 16), acc1[r]);
      }
      _mm512_storeu_ps(row, acc0[r]);
      _mm512_storeu_ps(row + 16, acc1[r]);
    } else {
      if (accumulate) {
        acc0[r] = _mm512_add_ps(_mm512_maskz_loadu_ps(mask0, row), acc0[r]);
        acc1[r] = _mm512_add_ps(_mm512_maskz_loadu_ps(mask1, row + 16), acc1[r]);
      }
      _mm512_mask_storeu_ps(row, mask0, acc0[r]);
      _mm512_mask_storeu_ps(row + 16, mask1, acc1[r]);
    }
  }
}

__mmask16 columns_mask(int64_t cols) {
  return cols >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << cols) - 1u);
}

// r[i] (row i of a 16 x 16 block) becomes column i: r[j] holds the block's column j.
WICK_AVX512 inline __attribute__((always_inline)) void transpose16(__m512 r[16]) {
  __m512 t[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; i += 2) {  // 32-bit pairs of rows i, i+1 within each 128-bit lane
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
#pragma GCC unroll 16
  for (int i = 0; i < 16; i += 4) {  // now r[i + c], lane L: column 4L + c of rows i..i+3
    r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
    r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
    r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
    r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
  }
#pragma GCC unroll 16
  for (int c = 0; c < 4; ++c) {  // 4 x 4 transpose of the 128-bit lanes of r[c], r[4 + c], r[8 + c], r[12 + c]
    __m512 x0 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x44), x1 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xEE);
    __m512 x2 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x44), x3 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xEE);
    t[c] = _mm512_shuffle_f32x4(x0, x2, 0x88);
    t[4 + c] = _mm512_shuffle_f32x4(x0, x2, 0xDD);
    t[8 + c] = _mm512_shuffle_f32x4(x1, x3, 0x88);
    t[12 + c] = _mm512_shuffle_f32x4(x1, x3, 0xDD);
  }
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}

// Copies column-major B (element (kk, j) at b[kk + j * ldb]) into panels of k x 32 row-major floats,
// zero beyond column n, for panels [begin, end): 16 x 16 blocks transposed in registers.
WICK_AVX512 void pack_b_panels(const float* b, int64_t ldb, int64_t k, int64_t n, float* packed, int64_t begin,
                               int64_t end) {
  for (int64_t panel = begin; panel < end; ++panel) {
    float* dst = packed + panel * k * tile_cols;
    for (int64_t half = 0; half < 2; ++half) {
      int64_t j0 = panel * tile_cols + half * 16;
      for (int64_t k0 = 0; k0 < k; k0 += 16) {
        int64_t depth = std::min<int64_t>(16, k - k0);
        __mmask16 k_mask = columns_mask(depth);
        __m512 r[16];
#pragma GCC unroll 16
        for (int64_t i = 0; i < 16; ++i)
          r[i] = j0 + i < n ? _mm512_maskz_loadu_ps(k_mask, b + (j0 + i) * ldb + k0) : _mm512_setzero_ps();
        transpose16(r);
        for (int64_t kk = 0; kk < depth; ++kk) _mm512_storeu_ps(dst + (k0 + kk) * tile_cols + half * 16, r[kk]);
      }
    }
  }
}

using TileFn = void (*)(const float*, int64_t, const float*, int64_t, int64_t, float*, int64_t, __mmask16, __mmask16,
                        bool, const float*, const float*, float);

template <bool AT, bool FULL>
constexpr TileFn tile_fns[tile_rows + 1] = {
    nullptr,               tile<1, AT, FULL>,  tile<2, AT, FULL>,  tile<3, AT, FULL>,  tile<4, AT, FULL>,
    tile<5, AT, FULL>,     tile<6, AT, FULL>,  tile<7, AT, FULL>,  tile<8, AT, FULL>,  tile<9, AT, FULL>,
    tile<10, AT, FULL>,    tile<11, AT, FULL>, tile<12, AT, FULL>, tile<13, AT, FULL>, tile<14, AT, FULL>};

void run_tiles(const Tiles& t, int64_t begin, int64_t end) {
  const TileFn* full = t.a_transposed ? tile_fns<true, true> : tile_fns<false, true>;
  const TileFn* partial = t.a_transposed ? tile_fns<true, false> : tile_fns<false, false>;
  for (int64_t index = begin; index < end; ++index) {
    int64_t block = t.rows_outer ? index / t.col_panels : index % t.row_blocks;
    int64_t panel = t.rows_outer ? index % t.col_panels : index / t.row_blocks;
    int64_t i0 = block * tile_rows, j0 = panel * tile_cols;
    int64_t rows = std::min(tile_rows, t.m - i0), cols = std::min(tile_cols, t.n - j0);
    const float* a = t.a_transposed ? t.a + i0 : t.a + i0 * t.lda;
    const float* b = t.b + panel * t.b_panel_step;
    // Rows stream past a resident B: while the last panel of a row block runs, fetch the next block's A.
    const float* next_a = nullptr;
    if (!t.a_transposed && t.rows_outer && panel == t.col_panels - 1 && i0 + tile_rows < t.m)
      next_a = t.a + (i0 + tile_rows) * t.lda;
    __mmask16 mask0 = columns_mask(cols), mask1 = cols > 16 ? columns_mask(cols - 16) : 0;
    TileFn fn = (cols == tile_cols ? full : partial)[rows];
    // K in slices of k_slice, each summed in registers and added to C: one f32 chain over a long K
    // (1568 rows of a weight gradient) rounds worse than slices added up, as BLAS's K blocking does.
    for (int64_t k0 = 0; k0 < t.k; k0 += k_slice) {
      int64_t depth = std::min(k_slice, t.k - k0);
      bool first = k0 == 0, last = k0 + depth == t.k;
      fn(t.a_transposed ? a + k0 * t.lda : a + k0, t.lda, b + k0 * t.b_step, t.b_step, depth, t.c + i0 * t.ldc + j0,
         t.ldc, mask0, mask1, t.accumulate || !first, first && t.bias != nullptr ? t.bias + j0 : nullptr,
         last && next_a != nullptr ? next_a : nullptr, t.alpha);
    }
  }
}
#endif

}  // namespace

bool avx512_gemm_available() {
  static const bool available = [] {
    const char* choice = std::getenv("WICK_CPU_GEMM");
    if (choice != nullptr && std::strcmp(choice, "openblas") == 0) return false;
    return cpu_has_avx512f();
  }();
  return available;
}

bool avx512_gemm_suits(const GemmProblem& p) {
  if (p.dtype != DType::F32 || p.k < 1 || p.m < 8 || p.n < 32 || !avx512_gemm_available()) return false;
  int64_t a_bytes = p.m * p.k * 4, b_bytes = p.k * p.n * 4;
  // B small: kept in L2 while A streams by (a column-major A gives 14 values from each of its rows, so
  // the rows must lie near each other). A small: B streams by, read in place, 32 values from each row,
  // so its rows too (an image's im2col columns, 10^5 values apart, would cost a TLB miss a row); a
  // column-major B would first be copied whole, which costs as much as OpenBLAS's packing.
  if (b_bytes <= avx512_gemm_max_operand_bytes && (!p.a_transposed || p.lda <= avx512_gemm_max_stride)) return true;
  return a_bytes <= avx512_gemm_max_operand_bytes && !p.b_transposed && p.ldb <= avx512_gemm_max_stride;
}

void avx512_gemm(const GemmProblem& p, const float* a, const float* b, float* c, bool threads, float alpha) {
#if defined(__x86_64__)
  WICK_CHECK(avx512_gemm_available(), "the AVX-512 GEMM called on a CPU without AVX-512");
  Tiles t;
  t.m = p.m;
  t.n = p.n;
  t.k = p.k;
  t.a = a;
  t.lda = p.lda;
  t.a_transposed = p.a_transposed;
  t.c = c;
  t.ldc = p.ldc;
  t.accumulate = p.accumulate;
  t.bias = static_cast<const float*>(p.bias);
  t.alpha = alpha;
  t.row_blocks = (p.m + tile_rows - 1) / tile_rows;
  t.col_panels = (p.n + tile_cols - 1) / tile_cols;
  t.rows_outer = p.k * p.n <= p.m * p.k;  // keep the smaller operand resident: B when rows stream by
  bool pack = p.b_transposed;
  thread_local std::vector<float> packed;
  if (pack) {
    packed.resize(static_cast<size_t>(t.col_panels * p.k * tile_cols));
    t.b = packed.data();
    t.b_step = tile_cols;
    t.b_panel_step = p.k * tile_cols;
  } else {
    t.b = b;
    t.b_step = p.ldb;
    t.b_panel_step = tile_cols;
  }
  int64_t n_tiles = t.row_blocks * t.col_panels;
  int n_threads = 1;
#if defined(_OPENMP)
  if (threads && !omp_in_parallel() && p.m * p.n * p.k >= small_gemm_flops)
    n_threads = static_cast<int>(std::min<int64_t>(max_threads(), n_tiles));
#endif
  if (n_threads <= 1) {
    if (pack) pack_b_panels(b, p.ldb, p.k, p.n, packed.data(), 0, t.col_panels);
    run_tiles(t, 0, n_tiles);
    return;
  }
#if defined(_OPENMP)
  float* packed_data = packed.data();
#pragma omp parallel num_threads(n_threads)
  {
    int64_t thread = omp_get_thread_num(), count = omp_get_num_threads();
    if (pack) {
      pack_b_panels(b, p.ldb, p.k, p.n, packed_data, t.col_panels * thread / count, t.col_panels * (thread + 1) / count);
#pragma omp barrier
    }
    run_tiles(t, n_tiles * thread / count, n_tiles * (thread + 1) / count);
  }
#endif
#else
  (void)p, (void)a, (void)b, (void)c, (void)threads, (void)alpha;
  WICK_CHECK(false, "the AVX-512 GEMM called on a CPU without AVX-512");
#endif
}

}  // namespace wick::cpu
