// f32 matmul through wick vs OpenBLAS called directly, square sizes 256..2048, same threads.
// Target: wick's overhead < 5% at 512^3 (ratio <= 1.05).
//   build/bench/cpu_matmul_bench --benchmark_min_time=0.5
#include <cblas.h>

#include <random>

#include "bench/bench_util.h"
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

}  // namespace

BENCHMARK(BM_wick_matmul)->Arg(256)->Arg(512)->Arg(1024)->Arg(2048)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_openblas_sgemm)->Arg(256)->Arg(512)->Arg(1024)->Arg(2048)->Unit(benchmark::kMicrosecond)->UseRealTime();

int main(int argc, char** argv) {
  return wick::bench::run_with_ratios(argc, argv, {{"wick_matmul", "openblas_sgemm"}});
}
