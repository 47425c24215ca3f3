// Helpers for wick's benchmark programs: every program times wick and a named peer on the same
// shapes in one run and prints the ratio.
//
//   BENCHMARK(BM_wick_matmul)->Arg(512);   BENCHMARK(BM_peer_openblas)->Arg(512);
//   int main(int argc, char** argv) { return wick::bench::run_with_ratios(argc, argv, {{"wick_matmul", "peer_openblas"}}); }
//
// Benchmarks named BM_<a>/<arg> and BM_<b>/<arg> are paired by arg; the table shows time(a)/time(b).
#pragma once

#include <benchmark/benchmark.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace wick::bench {

struct RatioPair {
  std::string subject;  // e.g. "wick_matmul"
  std::string peer;     // e.g. "openblas_sgemm"
};

int run_with_ratios(int argc, char** argv, const std::vector<RatioPair>& pairs);

}  // namespace wick::bench
