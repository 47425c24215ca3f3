#include "runtime/cpu/attention_backward.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "runtime/cpu/parallel.h"

namespace wick::cpu {
namespace {

inline constexpr int64_t rows_per_block = 64;

// Row-major C[m, n] = alpha * op(A) @ op(B) + beta * C, op(A) [m, k], op(B) [k, n].
void gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
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

template <typename C>
void backward_typed(const C* grad_out, const C* q, const C* k, const C* v, const C* out, const C* logsumexp,
                    const void* mask, DType mask_dtype, const int64_t mask_strides[4], const AttentionDims& dims,
                    bool causal, C scale, C* grad_q, C* grad_k, C* grad_v) {
  const int64_t n_q = dims.n_queries, n_k = dims.n_keys, d = dims.head_dim, dv = dims.value_dim;
  const int64_t n_heads = dims.batch * dims.heads;
  const C minus_inf = -std::numeric_limits<C>::infinity();
  if (n_k == 0 || dv == 0) {  // no keys or empty values: nothing depends on q, k (or v)
    std::fill(grad_q, grad_q + n_heads * n_q * d, C(0));
    std::fill(grad_k, grad_k + n_heads * n_k * d, C(0));
    std::fill(grad_v, grad_v + n_heads * n_k * dv, C(0));
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
          const C* k_head = k + bh * n_k * d;
          const C* v_head = v + bh * n_k * dv;
          C* grad_k_head = grad_k + bh * n_k * d;
          C* grad_v_head = grad_v + bh * n_k * dv;
          std::fill(grad_k_head, grad_k_head + n_k * d, C(0));
          std::fill(grad_v_head, grad_v_head + n_k * dv, C(0));
          for (int64_t row0 = 0; row0 < n_q; row0 += rows_per_block) {
            const int64_t n_rows = std::min(rows_per_block, n_q - row0);
            const C* q_rows = q + (bh * n_q + row0) * d;
            const C* grad_out_rows = grad_out + (bh * n_q + row0) * dv;
            const C* out_rows = out + (bh * n_q + row0) * dv;
            const C* lse_rows = logsumexp + bh * n_q + row0;
            C* grad_q_rows = grad_q + (bh * n_q + row0) * d;
            // P = exp(scale * q k^T + mask - logsumexp), 0 where dropped or the row keeps nothing.
            gemm(false, true, n_rows, n_k, d, scale, q_rows, d, k_head, d, C(0), probs.data(), n_k);
            for (int64_t r = 0; r < n_rows; ++r) {
              const int64_t i = row0 + r;
              C* p = probs.data() + r * n_k;
              if (causal)
                for (int64_t j = i + 1; j < n_k; ++j) p[j] = minus_inf;
              if (mask != nullptr) {
                int64_t base = b * mask_strides[0] + h * mask_strides[1] + i * mask_strides[2];
                if (mask_dtype == DType::U8) {
                  const uint8_t* m = static_cast<const uint8_t*>(mask) + base;
                  for (int64_t j = 0; j < n_k; ++j)
                    if (m[j * mask_strides[3]] == 0) p[j] = minus_inf;
                } else {
                  const C* m = static_cast<const C*>(mask) + base;
                  for (int64_t j = 0; j < n_k; ++j) p[j] += m[j * mask_strides[3]];
                }
              }
              const C lse = lse_rows[r];
              if (lse == minus_inf) {
                std::fill(p, p + n_k, C(0));
              } else {
                for (int64_t j = 0; j < n_k; ++j) p[j] = p[j] == minus_inf ? C(0) : std::exp(p[j] - lse);
              }
              C dot = 0;  // D_i = dO_i . O_i (= sum_j P_ij dP_ij)
              for (int64_t e = 0; e < dv; ++e) dot += grad_out_rows[r * dv + e] * out_rows[r * dv + e];
              row_dot[static_cast<size_t>(r)] = dot;
            }
            // dV += P^T dO
            gemm(true, false, n_k, dv, n_rows, C(1), probs.data(), n_k, grad_out_rows, dv, C(1), grad_v_head, dv);
            // dP = dO V^T, then dS = P * (dP - D) in place
            gemm(false, true, n_rows, n_k, dv, C(1), grad_out_rows, dv, v_head, dv, C(0), grad_scores.data(), n_k);
            for (int64_t r = 0; r < n_rows; ++r) {
              const C* p = probs.data() + r * n_k;
              C* ds = grad_scores.data() + r * n_k;
              const C dot = row_dot[static_cast<size_t>(r)];
              for (int64_t j = 0; j < n_k; ++j) ds[j] = p[j] * (ds[j] - dot);
            }
            // dQ = scale * dS K,  dK += scale * dS^T Q
            gemm(false, false, n_rows, d, n_k, scale, grad_scores.data(), n_k, k_head, d, C(0), grad_q_rows, d);
            gemm(true, false, n_k, d, n_rows, scale, grad_scores.data(), n_k, q_rows, d, C(1), grad_k_head, d);
          }
        }
      },
      1);
}

}  // namespace

void attention_backward(DType dtype, const void* grad_out, const void* q, const void* k, const void* v,
                        const void* out, const void* logsumexp, const void* mask, DType mask_dtype,
                        const int64_t mask_strides[4], const AttentionDims& dims, bool causal, double scale,
                        void* grad_q, void* grad_k, void* grad_v) {
  if (dtype == DType::F64)
    backward_typed<double>(static_cast<const double*>(grad_out), static_cast<const double*>(q),
                           static_cast<const double*>(k), static_cast<const double*>(v),
                           static_cast<const double*>(out), static_cast<const double*>(logsumexp), mask, mask_dtype,
                           mask_strides, dims, causal, scale, static_cast<double*>(grad_q),
                           static_cast<double*>(grad_k), static_cast<double*>(grad_v));
  else
    backward_typed<float>(static_cast<const float*>(grad_out), static_cast<const float*>(q),
                          static_cast<const float*>(k), static_cast<const float*>(v), static_cast<const float*>(out),
                          static_cast<const float*>(logsumexp), mask, mask_dtype, mask_strides, dims, causal,
                          static_cast<float>(scale), static_cast<float*>(grad_q), static_cast<float*>(grad_k),
                          static_cast<float*>(grad_v));
}

}  // namespace wick::cpu
