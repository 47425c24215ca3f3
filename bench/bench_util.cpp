#include "bench/bench_util.h"

#include <cstdio>

namespace wick::bench {
namespace {

// Collects real time per run name while forwarding everything to the console reporter.
class CollectingReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.error_occurred) continue;
      // With --benchmark_repetitions the median aggregate stands for the benchmark.
      if (run.run_type == Run::RT_Aggregate && run.aggregate_name == "median")
        medians_[run.run_name.str()] = run.GetAdjustedRealTime();
      else if (run.run_type == Run::RT_Iteration)
        times_[run.run_name.str()] = run.GetAdjustedRealTime();
    }
    for (const auto& [name, time] : medians_) times_[name] = time;
    ConsoleReporter::ReportRuns(runs);
  }
  const std::map<std::string, double>& times() const { return times_; }

 private:
  std::map<std::string, double> times_, medians_;
};

}  // namespace

int run_with_ratios(int argc, char** argv, const std::vector<RatioPair>& pairs) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  CollectingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  std::printf("\n%-40s %14s %14s %8s\n", "ratio (time / peer time)", "time", "peer time", "ratio");
  for (const auto& [name, time] : reporter.times()) {
    for (const RatioPair& pair : pairs) {
      std::string prefix = "BM_" + pair.subject;
      if (name.rfind(prefix, 0) != 0) continue;
      std::string suffix = name.substr(prefix.size());
      auto peer = reporter.times().find("BM_" + pair.peer + suffix);
      if (peer == reporter.times().end()) continue;
      std::printf("%-40s %14.1f %14.1f %8.3f\n", (pair.subject + suffix + " vs " + pair.peer).c_str(), time,
                  peer->second, time / peer->second);
    }
  }
  benchmark::Shutdown();
  return 0;
}

}  // namespace wick::bench
