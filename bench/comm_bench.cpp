// Collective bus bandwidth of wick's process groups, with nccl-tests' formulas
// (REFERENCES.md): algbw = S / t, where S is the full buffer (all-reduce: the tensor; reduce-scatter:
// the input; all-gather: the output); busbw = algbw * 2(n-1)/n for all-reduce and algbw * (n-1)/n
// for reduce-scatter and all-gather. t is the slowest rank's mean time per call.
//
//   mpirun --oversubscribe -np 2 build/bench/comm_bench [--max-mib 256] [--backend auto]
//          [--device cpu|cuda] [--dtype f32]
//   build/bench/comm_bench --device cuda --backend nccl   # one GPU: NCCL's one-rank collectives
// Prints a markdown table on rank 0. Sizes go from 1 KiB to --max-mib by factors of 4.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "comm/launch_env.h"
#include "runtime/error.h"
#include "runtime/ops/creation.h"
#include "runtime/tensor.h"

using namespace wick;

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  double max_mib = 256;
  std::string backend = "auto";
  std::string device = "cpu";
  std::string dtype = "f32";
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string key = argv[i], value = argv[i + 1];
    if (key == "--max-mib") o.max_mib = std::atof(value.c_str());
    else if (key == "--backend") o.backend = value;
    else if (key == "--device") o.device = value;
    else if (key == "--dtype") o.dtype = value;
    else WICK_FAIL(Config, "comm_bench: unknown option ", key, " (valid: --max-mib, --backend, --device, --dtype)");
  }
  return o;
}

// Mean seconds per call over `iters` calls (after one warm-up), the slowest rank's.
template <typename Fn>
double time_calls(comm::ProcessGroup& group, int iters, Fn fn) {
  fn();
  group.barrier();
  synchronize(group.device());
  auto start = Clock::now();
  for (int i = 0; i < iters; ++i) fn();
  synchronize(group.device());
  double mean = std::chrono::duration<double>(Clock::now() - start).count() / iters;
  Tensor t = Tensor::from_vector(std::vector<double>{mean}, {1}).to(group.device());  // NCCL: on the GPU
  group.all_reduce(t, comm::ReduceOp::Max);
  return t.to(Device::cpu()).item();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options o = parse(argc, argv);
    Device device = parse_device(o.device);
    DType dtype = parse_dtype(o.dtype);
    auto group = comm::make_process_group(o.backend, device, /*timeout_s=*/600);
    device = group->device();
    int n = group->size();
    if (group->rank() == 0) {
      std::printf("comm_bench: %s, %s, %s, %d ranks (%d per node)\n\n", group->backend().c_str(), device.str().c_str(),
                  dtype_name(dtype), n, group->local_size());
      std::printf("| bytes | op | iters | time (us) | algbw (GB/s) | busbw (GB/s) |\n");
      std::printf("|---:|---|---:|---:|---:|---:|\n");
    }
    int64_t element = dtype_size(dtype);
    for (double bytes = 1024; bytes <= o.max_mib * 1048576.0 + 1; bytes *= 4) {
      int64_t count = static_cast<int64_t>(bytes) / element;
      count = std::max<int64_t>(n, count / n * n);  // divisible by the number of ranks
      int64_t total = count * element;
      int iters = static_cast<int>(std::clamp<int64_t>((int64_t{64} << 20) / total, 2, 200));
      Tensor full = zeros({count}, dtype, device);
      Tensor part = zeros({count / n}, dtype, device);
      struct Row {
        const char* op;
        double factor;
        double seconds;
      };
      std::vector<Row> rows = {
          {"all_reduce", 2.0 * (n - 1) / n, time_calls(*group, iters, [&] { group->all_reduce(full); })},
          {"reduce_scatter", double(n - 1) / n, time_calls(*group, iters, [&] { group->reduce_scatter(full, part); })},
          {"all_gather", double(n - 1) / n, time_calls(*group, iters, [&] { group->all_gather(part, full); })},
      };
      if (group->rank() == 0)
        for (const Row& r : rows) {
          double algbw = static_cast<double>(total) / r.seconds / 1e9;
          std::printf("| %lld | %s | %d | %.1f | %.3f | %.3f |\n", static_cast<long long>(total), r.op, iters,
                      r.seconds * 1e6, algbw, algbw * r.factor);
        }
      std::fflush(stdout);
    }
  } catch (const WickError& e) {
    std::fprintf(stderr, "comm_bench: %s\n", e.what());
    comm::exit_after_failure(e.kind() == ErrorKind::Training ? 4 : 2);
  }
  return 0;
}
