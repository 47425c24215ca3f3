#include "runtime/cpu/attention.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "runtime/cpu/exp_f32.h"
#include "runtime/cpu/gemm_avx512.h"
#include "runtime/cpu/parallel.h"
#include "runtime/cpu/row_reduce.h"

namespace wick::cpu {
namespace {

inline constexpr int64_t rows_per_task = 64;

// Row-major C[m, n] = alpha * A[m, k] @ op(B) where op(B) = B^T (B stored [n, k]) or B ([k, n]).
// C is cleared here and the product accumulated (beta 1): bitwise what beta 0 gives, without
// OpenBLAS's slower clearing loop (runtime/cpu/matmul.cpp does the same).
template <typename C>
void clear_rows(C* c, int64_t m, int64_t n, int64_t ldc) {
  for (int64_t row = 0; row < m; ++row) std::memset(c + row * ldc, 0, static_cast<size_t>(n) * sizeof(C));
}

void gemm(bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float* c, int64_t ldc) {
  if (k > 0 && avx512_gemm_available()) {  // per-head products: no BLAS call overhead
    avx512_gemm(f32_product(false, transpose_b, m, n, k, a, lda, b, ldb, c, ldc, false), a, b, c, false, alpha);
    return;
  }
  clear_rows(c, m, n, ldc);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, transpose_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b,
              static_cast<blasint>(ldb), 1.0f, c, static_cast<blasint>(ldc));
}
void gemm(bool transpose_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
          const double* b, int64_t ldb, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, CblasNoTrans, transpose_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b,
              static_cast<blasint>(ldb), 0.0, c, static_cast<blasint>(ldc));
}

// s[j] = e^(s[j] - shift); the f32 loop vectorizes (runtime/cpu/exp_f32.h), -inf gives 0.
inline void exp_shifted(float* s, int64_t n, float shift) {
  for (int64_t j = 0; j < n; ++j) s[j] = exp_f32(s[j] - shift);
}
inline void exp_shifted(double* s, int64_t n, double shift) {
  for (int64_t j = 0; j < n; ++j) s[j] = std::exp(s[j] - shift);
}

template <typename C>
C maximum(const C* s, int64_t n) {
  if constexpr (std::is_same_v<C, float>) return row_max(s, n);
  C m = -std::numeric_limits<C>::infinity();
  for (int64_t j = 0; j < n; ++j) m = std::max(m, s[j]);
  return m;
}

template <typename C>
C total(const C* s, int64_t n) {
  if constexpr (std::is_same_v<C, float>) return row_sum(s, n);
  C sum = 0;
  for (int64_t j = 0; j < n; ++j) sum += s[j];
  return sum;
}

template <typename C>
void attention_typed(const C* q, const C* k, const C* v, const AttentionLayouts& at, const void* mask,
                     DType mask_dtype,
                     const int64_t mask_strides[4], const AttentionDims& dims, bool causal, C scale, C* out,
                     C* logsumexp) {
  const int64_t n_q = dims.n_queries, n_k = dims.n_keys, d = dims.head_dim, dv = dims.value_dim;
  const int64_t n_row_blocks = (n_q + rows_per_task - 1) / rows_per_task;
  const int64_t n_tasks = dims.batch * dims.heads * n_row_blocks;
  const C minus_inf = -std::numeric_limits<C>::infinity();
  // One task per (batch, head, block of query rows); BLAS runs inside each task.
  parallel_for(
      n_tasks,
      [&](int64_t begin, int64_t end) {
        std::vector<C> scores(static_cast<size_t>(rows_per_task * std::max<int64_t>(n_k, 1)));
        for (int64_t task = begin; task < end; ++task) {
          int64_t bh = task / n_row_blocks, row0 = (task % n_row_blocks) * rows_per_task;
          int64_t b = bh / dims.heads, h = bh % dims.heads;
          int64_t n_rows = std::min(rows_per_task, n_q - row0);
          const C* q_rows = q + at.q.at(b, h) + row0 * at.q.row;
          const C* k_head = k + at.k.at(b, h);
          const C* v_head = v + at.v.at(b, h);
          C* out_rows = out + at.out.at(b, h) + row0 * at.out.row;
          C* lse_rows = logsumexp + bh * n_q + row0;
          if (n_k > 0) gemm(true, n_rows, n_k, d, scale, q_rows, at.q.row, k_head, at.k.row, scores.data(), n_k);
          for (int64_t r = 0; r < n_rows; ++r) {
            int64_t i = row0 + r;
            C* s = scores.data() + r * n_k;
            if (causal)
              for (int64_t j = std::max<int64_t>(i + 1, 0); j < n_k; ++j) s[j] = minus_inf;
            if (mask != nullptr) {
              int64_t base = b * mask_strides[0] + h * mask_strides[1] + i * mask_strides[2];
              if (mask_dtype == DType::U8) {
                const uint8_t* m = static_cast<const uint8_t*>(mask) + base;
                drop_masked(s, m, mask_strides[3], n_k);
              } else {
                const C* m = static_cast<const C*>(mask) + base;
                for (int64_t j = 0; j < n_k; ++j) s[j] += m[j * mask_strides[3]];
              }
            }
            C row_max = maximum(s, n_k);
            if (row_max == minus_inf) {  // every key masked: output 0, logsumexp -inf
              std::fill(s, s + n_k, C(0));
              lse_rows[r] = minus_inf;
              continue;
            }
            exp_shifted(s, n_k, row_max);
            C sum = total(s, n_k);
            C inverse = C(1) / sum;
            for (int64_t j = 0; j < n_k; ++j) s[j] *= inverse;
            lse_rows[r] = row_max + std::log(sum);
          }
          if (n_k > 0 && dv > 0)
            gemm(false, n_rows, dv, n_k, C(1), scores.data(), n_k, v_head, at.v.row, out_rows, at.out.row);
          else
            for (int64_t r = 0; r < n_rows; ++r) std::fill(out_rows + r * at.out.row, out_rows + r * at.out.row + dv, C(0));
        }
      },
      1);
}

}  // namespace

void attention_forward(DType dtype, const void* q, const void* k, const void* v, const AttentionLayouts& layouts,
                       const void* mask, DType mask_dtype, const int64_t mask_strides[4], const AttentionDims& dims,
                       bool causal, double scale, void* out, void* logsumexp) {
  if (dtype == DType::F64)
    attention_typed<double>(static_cast<const double*>(q), static_cast<const double*>(k),
                            static_cast<const double*>(v), layouts, mask, mask_dtype, mask_strides, dims, causal, scale,
                            static_cast<double*>(out), static_cast<double*>(logsumexp));
  else
    attention_typed<float>(static_cast<const float*>(q), static_cast<const float*>(k), static_cast<const float*>(v),
                           layouts, mask, mask_dtype, mask_strides, dims, causal, static_cast<float>(scale),
                           static_cast<float*>(out), static_cast<float*>(logsumexp));
}

}  // namespace wick::cpu
