// f32 matmul through wick vs OpenBLAS called directly, same threads: square sizes 256..2048 (target:
// wick's overhead < 5% at 512^3, ratio <= 1.05), and the products of the quickstart DiT's train step
// through cpu::gemm (wick's AVX-512 kernel where the CPU has it) on preallocated operands.
//   build/bench/cpu_matmul_bench --benchmark_min_time=0.5
//   OMP_NUM_THREADS=1 build/bench/cpu_matmul_bench --benchmark_filter=dit
#include <cblas.h>

#include <random>
#include <vector>

#include "bench/bench_util.h"
#include "runtime/cpu/matmul.h"
#include "runtime/ops/matmul.h"

namespace {

wick::Tensor random_matrix(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(static_cast<size_t>(n * n));
  for (float& v : values) v = normal(rng);
  return wick::Tensor::from_vector<float>(values, {n, n});
}

void set_flops(benchmark::State& state, int64_t n) {
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * n * n * n, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}

void BM_wick_matmul(benchmark::State& state) {
  int64_t n = state.range(0);
  wick::Tensor a = random_matrix(n, 1), b = random_matrix(n, 2);
  for (auto _ : state) benchmark::DoNotOptimize(wick::matmul(a, b).data());
  set_flops(state, n);
}

void BM_openblas_sgemm(benchmark::State& state) {
  int64_t n = state.range(0);
  wick::Tensor a = random_matrix(n, 1), b = random_matrix(n, 2);
  // The peer writes into a preallocated buffer: wick's output allocation counts as wick overhead.
  std::vector<float> out(static_cast<size_t>(n * n));
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(n), static_cast<int>(n),
                static_cast<int>(n), 1.0f, a.data_as<float>(), static_cast<int>(n), b.data_as<float>(),
                static_cast<int>(n), 0.0f, out.data(), static_cast<int>(n));
    benchmark::DoNotOptimize(out.data());
  }
  set_flops(state, n);
}

// The quickstart DiT's linear layers (hidden 96, MLP 384, batch 32 x 49 image tokens, 57 with the text
// tokens): forward y = x W^T (B column-major), input gradient g W, weight gradient g^T x (A column-major).
struct DitGemm {
  const char* name;
  int64_t m, n, k;
  bool a_transposed, b_transposed;
};
const DitGemm dit_gemms[] = {
    {"q", 1568, 96, 96, false, true},          {"kv", 1824, 192, 96, false, true},
    {"fc1", 1568, 384, 96, false, true},       {"fc2", 1568, 96, 384, false, true},
    {"dx_fc1", 1568, 96, 384, false, false},   {"dx_fc2", 1568, 384, 96, false, false},
    {"dw_fc1", 384, 96, 1568, true, false},    {"dw_fc2", 96, 384, 1568, true, false},
    {"dw_q", 96, 96, 1568, true, false},
};

struct DitOperands {
  std::vector<float> a, b, c;
  wick::GemmProblem p;
};

DitOperands dit_operands(const DitGemm& g) {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  DitOperands o;
  o.a.resize(static_cast<size_t>(g.m * g.k));
  o.b.resize(static_cast<size_t>(g.k * g.n));
  o.c.resize(static_cast<size_t>(g.m * g.n));
  for (float& v : o.a) v = normal(rng);
  for (float& v : o.b) v = normal(rng);
  o.p.m = g.m;
  o.p.n = g.n;
  o.p.k = g.k;
  o.p.a = o.a.data();
  o.p.a_transposed = g.a_transposed;
  o.p.lda = g.a_transposed ? g.m : g.k;
  o.p.b = o.b.data();
  o.p.b_transposed = g.b_transposed;
  o.p.ldb = g.b_transposed ? g.k : g.n;
  o.p.c = o.c.data();
  o.p.ldc = g.n;
  return o;
}

void set_dit_counters(benchmark::State& state, const DitGemm& g) {
  state.SetLabel(g.name);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * g.m * g.n * g.k, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}

void BM_wick_dit_gemm(benchmark::State& state) {
  const DitGemm& g = dit_gemms[state.range(0)];
  DitOperands o = dit_operands(g);
  for (auto _ : state) {
    wick::cpu::gemm(o.p);
    benchmark::DoNotOptimize(o.c.data());
  }
  set_dit_counters(state, g);
}

void BM_openblas_dit_gemm(benchmark::State& state) {
  const DitGemm& g = dit_gemms[state.range(0)];
  DitOperands o = dit_operands(g);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, g.a_transposed ? CblasTrans : CblasNoTrans, g.b_transposed ? CblasTrans : CblasNoTrans,
                static_cast<int>(g.m), static_cast<int>(g.n), static_cast<int>(g.k), 1.0f, o.a.data(),
                static_cast<int>(o.p.lda), o.b.data(), static_cast<int>(o.p.ldb), 0.0f, o.c.data(),
                static_cast<int>(g.n));
    benchmark::DoNotOptimize(o.c.data());
  }
  set_dit_counters(state, g);
}

}  // namespace

BENCHMARK(BM_wick_dit_gemm)->DenseRange(0, 8)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_openblas_dit_gemm)->DenseRange(0, 8)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_wick_matmul)->Arg(256)->Arg(512)->Arg(1024)->Arg(2048)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_openblas_sgemm)->Arg(256)->Arg(512)->Arg(1024)->Arg(2048)->Unit(benchmark::kMicrosecond)->UseRealTime();

int main(int argc, char** argv) {
  return wick::bench::run_with_ratios(argc, argv,
                                      {{"wick_matmul", "openblas_sgemm"}, {"wick_dit_gemm", "openblas_dit_gemm"}});
}
