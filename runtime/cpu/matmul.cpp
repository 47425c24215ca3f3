#include "runtime/cpu/matmul.h"

#include <cblas.h>

#include <cstring>
#include <type_traits>

#include "runtime/cpu/gemm_avx512.h"
#include "runtime/cpu/parallel.h"
#include "runtime/error.h"

namespace wick::cpu {
namespace {

template <typename T>
void gemm_one(const GemmProblem& p, const T* a, const T* b, T* c, bool threads) {
  if constexpr (std::is_same_v<T, float>) {
    if (avx512_gemm_suits(p)) {
      avx512_gemm(p, a, b, c, threads);
      return;
    }
  }
  auto trans_a = p.a_transposed ? CblasTrans : CblasNoTrans;
  auto trans_b = p.b_transposed ? CblasTrans : CblasNoTrans;
  auto m = static_cast<blasint>(p.m), n = static_cast<blasint>(p.n), k = static_cast<blasint>(p.k);
  auto lda = static_cast<blasint>(p.lda), ldb = static_cast<blasint>(p.ldb), ldc = static_cast<blasint>(p.ldc);
  // C = A @ B as C = 0, then C += A @ B: OpenBLAS clears C for beta = 0 with its own strided loop
  // before the same accumulating kernel, so the result is bitwise the same and memset is faster.
  // C = bias + A @ B likewise: every row of C set to the bias row first.
  if (p.bias != nullptr) {
    for (int64_t row = 0; row < p.m; ++row)
      std::memcpy(c + row * p.ldc, p.bias, static_cast<size_t>(p.n) * sizeof(T));
  } else if (!p.accumulate) {
    if (p.ldc == p.n)
      std::memset(c, 0, static_cast<size_t>(p.m * p.n) * sizeof(T));
    else
      for (int64_t row = 0; row < p.m; ++row) std::memset(c + row * p.ldc, 0, static_cast<size_t>(p.n) * sizeof(T));
  }
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, trans_a, trans_b, m, n, k, 1.0f, a, lda, b, ldb, 1.0f, c, ldc);
  else
    cblas_dgemm(CblasRowMajor, trans_a, trans_b, m, n, k, 1.0, a, lda, b, ldb, 1.0, c, ldc);
}

template <typename T>
void gemm_typed(const GemmProblem& p) {
  const T* a = static_cast<const T*>(p.a);
  const T* b = static_cast<const T*>(p.b);
  T* c = static_cast<T*>(p.c);
  auto run = [&](int64_t i, bool threads) {
    gemm_one<T>(p, a + p.a_batch.offset_of(i), b + p.b_batch.offset_of(i), c + p.c_batch.offset_of(i), threads);
  };
  if (p.n_batch > 1 && p.m * p.n * p.k < small_gemm_flops) {
    // One product per iteration: grain 1 spreads the batch over the cores.
    parallel_for(p.n_batch, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) run(i, false);
    }, 1);
    return;
  }
  for (int64_t i = 0; i < p.n_batch; ++i) run(i, true);
}

}  // namespace

void gemm(const GemmProblem& problem) {
  if (problem.m == 0 || problem.n == 0 || problem.n_batch == 0) return;
  WICK_CHECK(problem.bias == nullptr || !problem.accumulate, "gemm: a bias row and accumulate together");
  if (problem.dtype == DType::F64)
    gemm_typed<double>(problem);
  else
    gemm_typed<float>(problem);
}

}  // namespace wick::cpu
