// CPU memory-bound ops through wick vs memcpy moving the same number of bytes, same threads.
// Each benchmark's argument is the bytes it moves (reads + writes); the ratio table compares
// wick's time with memcpy's for the same bytes (1.0 = as fast as copying).
//   build/bench/cpu_elementwise_bench --benchmark_min_time=0.5
#include <cstring>

#include "bench/bench_util.h"
#include "runtime/cpu/parallel.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/reduce.h"
#include "runtime/ops/random.h"
#include "runtime/ops/softmax.h"

namespace {

constexpr int64_t n_elements = int64_t(1) << 24;  // 64 MiB of f32 per tensor: far beyond the caches

wick::Tensor random_vector(int64_t n, uint64_t seed) {
  return wick::randn({n}, wick::derive_stream(seed, 0, 0, wick::RngPurpose::Test), wick::DType::F32);
}

void set_bandwidth(benchmark::State& state) {
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(state.range(0)) / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}

// memcpy of bytes/2 (it reads bytes/2 and writes bytes/2), split over the same OpenMP threads wick
// uses, so both sides have the same cores: the copy-bandwidth ceiling.
void BM_memcpy(benchmark::State& state) {
  int64_t half = state.range(0) / 2;
  std::vector<char> src(static_cast<size_t>(half), 1), dst(static_cast<size_t>(half), 0);
  for (auto _ : state) {
    wick::cpu::parallel_for(half, [&](int64_t begin, int64_t end) {
      std::memcpy(dst.data() + begin, src.data() + begin, static_cast<size_t>(end - begin));
    });
    benchmark::DoNotOptimize(dst.data());
  }
  set_bandwidth(state);
}

void BM_wick_add(benchmark::State& state) {  // reads 2n, writes n
  wick::Tensor a = random_vector(n_elements, 1), b = random_vector(n_elements, 2);
  for (auto _ : state) benchmark::DoNotOptimize(wick::add(a, b).data());
  set_bandwidth(state);
}

void BM_wick_exp(benchmark::State& state) {  // reads n, writes n
  wick::Tensor a = random_vector(n_elements, 1);
  for (auto _ : state) benchmark::DoNotOptimize(wick::exp(a).data());
  set_bandwidth(state);
}

void BM_wick_sum(benchmark::State& state) {  // reads n
  wick::Tensor a = random_vector(n_elements, 1);
  for (auto _ : state) benchmark::DoNotOptimize(wick::sum(a).data());
  set_bandwidth(state);
}

void BM_wick_softmax(benchmark::State& state) {  // reads n, writes n (rows of 4096)
  wick::Tensor a = random_vector(n_elements, 1).view({-1, 4096});
  for (auto _ : state) benchmark::DoNotOptimize(wick::softmax(a, -1).data());
  set_bandwidth(state);
}

constexpr int64_t f32_bytes = 4 * n_elements;

}  // namespace

BENCHMARK(BM_memcpy)->Arg(3 * f32_bytes)->Arg(2 * f32_bytes)->Arg(f32_bytes)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_wick_add)->Arg(3 * f32_bytes)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_wick_exp)->Arg(2 * f32_bytes)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_wick_softmax)->Arg(2 * f32_bytes)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_wick_sum)->Arg(f32_bytes)->UseRealTime()->Unit(benchmark::kMillisecond);

int main(int argc, char** argv) {
  return wick::bench::run_with_ratios(
      argc, argv, {{"wick_add", "memcpy"}, {"wick_exp", "memcpy"}, {"wick_softmax", "memcpy"}, {"wick_sum", "memcpy"}});
}
