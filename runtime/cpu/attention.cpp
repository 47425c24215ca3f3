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

// ---- gradients ----

namespace {

inline constexpr int64_t rows_per_block = 64;

// Row-major C[m, n] = alpha * op(A) @ op(B) + beta * C, op(A) [m, k], op(B) [k, n], beta 0 or 1.
void gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (k > 0 && avx512_gemm_available()) {  // per-head products: no BLAS call overhead
    avx512_gemm(f32_product(transpose_a, transpose_b, m, n, k, a, lda, b, ldb, c, ldc, beta != 0.0f), a, b, c, false,
                alpha);
    return;
  }
  // beta 0 as "clear, then accumulate": bitwise the same, without OpenBLAS's slower clearing loop.
  if (beta == 0.0f) {
    for (int64_t row = 0; row < m; ++row) std::memset(c + row * ldc, 0, static_cast<size_t>(n) * sizeof(float));
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans, transpose_b ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}
void gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
          int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans, transpose_b ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

// Rows [0, n_rows) of `cols` elements at `row` apart set to zero.
template <typename C>
void zero_rows(C* base, int64_t n_rows, int64_t cols, int64_t row) {
  for (int64_t r = 0; r < n_rows; ++r) std::fill(base + r * row, base + r * row + cols, C(0));
}

template <typename C>
C dot_product(const C* x, const C* y, int64_t n) {
  if constexpr (std::is_same_v<C, float>) return row_dot(x, y, n);
  C dot = 0;
  for (int64_t e = 0; e < n; ++e) dot += x[e] * y[e];
  return dot;
}

template <typename C>
void backward_typed(const C* grad_out, const C* q, const C* k, const C* v, const C* out, const C* logsumexp,
                    const AttentionBackwardLayouts& at, const void* mask, DType mask_dtype, const int64_t mask_strides[4], const AttentionDims& dims,
                    bool causal, C scale, C* grad_q, C* grad_k, C* grad_v) {
  const int64_t n_q = dims.n_queries, n_k = dims.n_keys, d = dims.head_dim, dv = dims.value_dim;
  const int64_t n_heads = dims.batch * dims.heads;
  const C minus_inf = -std::numeric_limits<C>::infinity();
  if (n_k == 0 || dv == 0) {  // no keys or empty values: nothing depends on q, k (or v)
    for (int64_t b = 0; b < dims.batch; ++b)
      for (int64_t h = 0; h < dims.heads; ++h) {
        zero_rows(grad_q + at.grad_q.at(b, h), n_q, d, at.grad_q.row);
        zero_rows(grad_k + at.grad_k.at(b, h), n_k, d, at.grad_k.row);
        zero_rows(grad_v + at.grad_v.at(b, h), n_k, dv, at.grad_v.row);
      }
    return;
  }
  // One task per (batch, head): grad_k and grad_v of a head accumulate over its query blocks.
  parallel_for(
      n_heads,
      [&](int64_t begin, int64_t end) {
        std::vector<C> probs(static_cast<size_t>(rows_per_block * n_k));
        std::vector<C> grad_scores(static_cast<size_t>(rows_per_block * n_k));
        std::vector<C> row_dot(static_cast<size_t>(rows_per_block));
        for (int64_t bh = begin; bh < end; ++bh) {
          const int64_t b = bh / dims.heads, h = bh % dims.heads;
          const C* k_head = k + at.k.at(b, h);
          const C* v_head = v + at.v.at(b, h);
          C* grad_k_head = grad_k + at.grad_k.at(b, h);
          C* grad_v_head = grad_v + at.grad_v.at(b, h);
          zero_rows(grad_k_head, n_k, d, at.grad_k.row);
          zero_rows(grad_v_head, n_k, dv, at.grad_v.row);
          for (int64_t row0 = 0; row0 < n_q; row0 += rows_per_block) {
            const int64_t n_rows = std::min(rows_per_block, n_q - row0);
            const C* q_rows = q + at.q.at(b, h) + row0 * at.q.row;
            const C* grad_out_rows = grad_out + at.grad_out.at(b, h) + row0 * at.grad_out.row;
            const C* out_rows = out + at.out.at(b, h) + row0 * at.out.row;
            const C* lse_rows = logsumexp + bh * n_q + row0;
            C* grad_q_rows = grad_q + at.grad_q.at(b, h) + row0 * at.grad_q.row;
            // P = exp(scale * q k^T + mask - logsumexp), 0 where dropped or the row keeps nothing.
            gemm(false, true, n_rows, n_k, d, scale, q_rows, at.q.row, k_head, at.k.row, C(0), probs.data(), n_k);
            for (int64_t r = 0; r < n_rows; ++r) {
              const int64_t i = row0 + r;
              C* p = probs.data() + r * n_k;
              if (causal)
                for (int64_t j = i + 1; j < n_k; ++j) p[j] = minus_inf;
              if (mask != nullptr) {
                int64_t base = b * mask_strides[0] + h * mask_strides[1] + i * mask_strides[2];
                if (mask_dtype == DType::U8) {
                  const uint8_t* m = static_cast<const uint8_t*>(mask) + base;
                  drop_masked(p, m, mask_strides[3], n_k);
                } else {
                  const C* m = static_cast<const C*>(mask) + base;
                  for (int64_t j = 0; j < n_k; ++j) p[j] += m[j * mask_strides[3]];
                }
              }
              const C lse = lse_rows[r];
              if (lse == minus_inf)
                std::fill(p, p + n_k, C(0));
              else
                exp_shifted(p, n_k, lse);
              const C* go = grad_out_rows + r * at.grad_out.row;
              const C* o = out_rows + r * at.out.row;
              C dot = dot_product(go, o, dv);  // D_i = dO_i . O_i (= sum_j P_ij dP_ij)
              row_dot[static_cast<size_t>(r)] = dot;
            }
            // dV += P^T dO
            gemm(true, false, n_k, dv, n_rows, C(1), probs.data(), n_k, grad_out_rows, at.grad_out.row, C(1),
                 grad_v_head, at.grad_v.row);
            // dP = dO V^T, then dS = P * (dP - D) in place
            gemm(false, true, n_rows, n_k, dv, C(1), grad_out_rows, at.grad_out.row, v_head, at.v.row, C(0),
                 grad_scores.data(), n_k);
            for (int64_t r = 0; r < n_rows; ++r) {
              const C* p = probs.data() + r * n_k;
              C* ds = grad_scores.data() + r * n_k;
              const C dot = row_dot[static_cast<size_t>(r)];
              for (int64_t j = 0; j < n_k; ++j) ds[j] = p[j] * (ds[j] - dot);
            }
            // dQ = scale * dS K,  dK += scale * dS^T Q
            gemm(false, false, n_rows, d, n_k, scale, grad_scores.data(), n_k, k_head, at.k.row, C(0), grad_q_rows,
                 at.grad_q.row);
            gemm(true, false, n_k, d, n_rows, scale, grad_scores.data(), n_k, q_rows, at.q.row, C(1), grad_k_head,
                 at.grad_k.row);
          }
        }
      },
      1);
}

}  // namespace

void attention_backward(DType dtype, const void* grad_out, const void* q, const void* k, const void* v,
                        const void* out, const void* logsumexp, const AttentionBackwardLayouts& layouts,
                        const void* mask, DType mask_dtype, const int64_t mask_strides[4], const AttentionDims& dims,
                        bool causal, double scale, void* grad_q, void* grad_k, void* grad_v) {
  if (dtype == DType::F64)
    backward_typed<double>(static_cast<const double*>(grad_out), static_cast<const double*>(q),
                           static_cast<const double*>(k), static_cast<const double*>(v),
                           static_cast<const double*>(out), static_cast<const double*>(logsumexp), layouts, mask, mask_dtype,
                           mask_strides, dims, causal, scale, static_cast<double*>(grad_q),
                           static_cast<double*>(grad_k), static_cast<double*>(grad_v));
  else
    backward_typed<float>(static_cast<const float*>(grad_out), static_cast<const float*>(q),
                          static_cast<const float*>(k), static_cast<const float*>(v), static_cast<const float*>(out),
                          static_cast<const float*>(logsumexp), layouts, mask, mask_dtype, mask_strides, dims, causal,
                          static_cast<float>(scale), static_cast<float*>(grad_q), static_cast<float*>(grad_k),
                          static_cast<float*>(grad_v));
}
}  // namespace wick::cpu
