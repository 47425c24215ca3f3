// wick's AVX-512 f32 GEMM (runtime/cpu/gemm_avx512.h) against a float64 triple loop: every operand
// layout, partial tiles in both directions, padded leading dimensions (whose padding must stay
// untouched), C = a A @ B, C += a A @ B and C = bias + a A @ B; threads split the tiles without changing
// a bit. Skipped on CPUs without AVX-512.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/cpu/gemm_avx512.h"

namespace wick {
namespace {

enum class Mode { assign, accumulate, bias };

struct Case {
  int64_t m, n, k;
  bool a_transposed, b_transposed;
  Mode mode;
  float alpha = 1.0f;  // C = alpha (A @ B) (+ C or bias)
};

constexpr float padding_value = 12345.0f;

struct Operands {
  GemmProblem p;
  std::vector<float> a, b, c, bias;
};

Operands make_operands(const Case& t, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  Operands o;
  GemmProblem& p = o.p;
  p.m = t.m;
  p.n = t.n;
  p.k = t.k;
  p.a_transposed = t.a_transposed;
  p.b_transposed = t.b_transposed;
  // Leading dimensions a few elements past the minimum, so rows do not sit back to back.
  p.lda = (t.a_transposed ? t.m : t.k) + 3;
  p.ldb = (t.b_transposed ? t.k : t.n) + 5;
  p.ldc = t.n + 7;
  o.a.resize(static_cast<size_t>((t.a_transposed ? t.k : t.m) * p.lda));
  o.b.resize(static_cast<size_t>((t.b_transposed ? t.n : t.k) * p.ldb));
  o.c.assign(static_cast<size_t>(t.m * p.ldc), padding_value);
  for (float& v : o.a) v = uniform(rng);
  for (float& v : o.b) v = uniform(rng);
  if (t.mode == Mode::accumulate)
    for (int64_t i = 0; i < t.m; ++i)
      for (int64_t j = 0; j < t.n; ++j) o.c[static_cast<size_t>(i * p.ldc + j)] = uniform(rng);
  if (t.mode == Mode::bias) {
    o.bias.resize(static_cast<size_t>(t.n));
    for (float& v : o.bias) v = uniform(rng);
    p.bias = o.bias.data();
  }
  p.accumulate = t.mode == Mode::accumulate;
  p.a = o.a.data();
  p.b = o.b.data();
  p.c = o.c.data();
  return o;
}

float a_at(const Operands& o, int64_t i, int64_t kk) {
  return o.p.a_transposed ? o.a[static_cast<size_t>(i + kk * o.p.lda)] : o.a[static_cast<size_t>(i * o.p.lda + kk)];
}

float b_at(const Operands& o, int64_t kk, int64_t j) {
  return o.p.b_transposed ? o.b[static_cast<size_t>(kk + j * o.p.ldb)] : o.b[static_cast<size_t>(kk * o.p.ldb + j)];
}

std::string describe(const Case& t) {
  const char* modes[] = {"C = a A @ B", "C += a A @ B", "C = bias + a A @ B"};
  return std::to_string(t.m) + "x" + std::to_string(t.n) + "x" + std::to_string(t.k) +
         (t.a_transposed ? " A^T" : " A") + (t.b_transposed ? " B^T " : " B ") + modes[static_cast<int>(t.mode)] +
         " a=" + std::to_string(t.alpha);
}

void check_case(const Case& t) {
  SCOPED_TRACE(describe(t));
  Operands o = make_operands(t, static_cast<uint64_t>(t.m * 1000003 + t.n * 1009 + t.k));
  std::vector<float> c_before = o.c;
  cpu::avx512_gemm(o.p, o.a.data(), o.b.data(), o.c.data(), /*threads=*/false, t.alpha);
  for (int64_t i = 0; i < t.m; ++i) {
    for (int64_t j = 0; j < o.p.ldc; ++j) {
      float got = o.c[static_cast<size_t>(i * o.p.ldc + j)];
      if (j >= t.n) {
        ASSERT_EQ(got, padding_value) << "C's padding written at row " << i << " column " << j;
        continue;
      }
      double want = 0, magnitude = 0;
      for (int64_t kk = 0; kk < t.k; ++kk) {
        double term = static_cast<double>(t.alpha) * a_at(o, i, kk) * b_at(o, kk, j);
        want += term;
        magnitude += std::fabs(term);
      }
      if (t.mode == Mode::accumulate) want += c_before[static_cast<size_t>(i * o.p.ldc + j)];
      if (t.mode == Mode::bias) want += o.bias[static_cast<size_t>(j)];
      // f32 rounding of a k-term sum, with room: a wrong row or column is off by O(1).
      double tolerance = 1e-6 + 2.0 * (static_cast<double>(t.k) + 2) * 6e-8 * (magnitude + 1.0);
      ASSERT_NEAR(got, want, tolerance) << "C[" << i << ", " << j << "]";
    }
  }
  // The same product split over the threads: bitwise the same.
  Operands threaded = make_operands(t, static_cast<uint64_t>(t.m * 1000003 + t.n * 1009 + t.k));
  cpu::avx512_gemm(threaded.p, threaded.a.data(), threaded.b.data(), threaded.c.data(), /*threads=*/true, t.alpha);
  ASSERT_EQ(std::memcmp(threaded.c.data(), o.c.data(), o.c.size() * sizeof(float)), 0) << "threads changed the result";
}

TEST(GemmAvx512, MatchesFloat64ForEveryLayoutAndEdge) {
  if (!cpu::avx512_gemm_available()) GTEST_SKIP() << "no AVX-512 on this CPU (or WICK_CPU_GEMM=openblas)";
  const int64_t ms[] = {1, 8, 14, 15, 45}, ns[] = {16, 24, 32, 33, 57}, ks[] = {1, 7, 96};
  for (int64_t m : ms)
    for (int64_t n : ns)
      for (int64_t k : ks)
        for (int layout = 0; layout < 4; ++layout)
          for (Mode mode : {Mode::assign, Mode::accumulate, Mode::bias})
            for (float alpha : {1.0f, 0.375f})
              check_case({m, n, k, (layout & 1) != 0, (layout & 2) != 0, mode, alpha});
}

TEST(GemmAvx512, LongInnerAxisAndManyTiles) {
  if (!cpu::avx512_gemm_available()) GTEST_SKIP() << "no AVX-512 on this CPU (or WICK_CPU_GEMM=openblas)";
  // The shapes of a small DiT's weight gradients (K = batch x tokens) and projections.
  check_case({96, 96, 1568, true, false, Mode::accumulate});
  check_case({40, 130, 600, true, false, Mode::assign});
  check_case({300, 96, 96, false, true, Mode::bias});
  check_case({300, 100, 200, false, false, Mode::assign});
}

TEST(GemmAvx512, SuitsOnlyProductsWithASmallOperand) {
  if (!cpu::avx512_gemm_available()) GTEST_SKIP() << "no AVX-512 on this CPU (or WICK_CPU_GEMM=openblas)";
  GemmProblem p;
  p.dtype = DType::F32;
  p.m = 1568;
  p.n = 96;
  p.k = 96;
  p.b_transposed = true;
  EXPECT_TRUE(cpu::avx512_gemm_suits(p));
  p.dtype = DType::F64;
  EXPECT_FALSE(cpu::avx512_gemm_suits(p)) << "f64 stays with OpenBLAS";
  p.dtype = DType::F32;
  p.n = 16;
  EXPECT_FALSE(cpu::avx512_gemm_suits(p)) << "narrower than a tile: OpenBLAS";
  p.n = 96;
  p.m = 4;
  EXPECT_FALSE(cpu::avx512_gemm_suits(p)) << "fewer rows than 8: OpenBLAS";
  // Both operands over 1 MiB: OpenBLAS's cache blocking wins.
  p.m = p.n = p.k = 1024;
  EXPECT_FALSE(cpu::avx512_gemm_suits(p));
  // A small and B large and row-major: B is streamed in place.
  p.m = 64;
  p.k = 1024;
  p.n = 4096;
  p.b_transposed = false;
  EXPECT_TRUE(cpu::avx512_gemm_suits(p));
  p.b_transposed = true;  // ... but a large column-major B would need a whole copy first
  EXPECT_FALSE(cpu::avx512_gemm_suits(p));
  // A convolution's weights [128, 1152] times the im2col columns of a 512 x 512 image: the columns'
  // rows lie 262,144 values apart, too far to stream 32 values from each: OpenBLAS.
  p.m = 128;
  p.k = 1152;
  p.n = p.ldb = 262144;
  p.b_transposed = false;
  EXPECT_FALSE(cpu::avx512_gemm_suits(p));
  p.n = p.ldb = 4096;
  EXPECT_TRUE(cpu::avx512_gemm_suits(p));
}

}  // namespace
}  // namespace wick
