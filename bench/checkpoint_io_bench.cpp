// Checkpoint write and read throughput against the disk's sequential bandwidth measured with dd.
//
//   build/bench/checkpoint_io_bench [--mib 512] [--dir /tmp]
//
// Write: CheckpointWriter with one model.safetensors of --mib MiB of f32 tensors (64 tensors), then
// commit (SHA-256 of every file, manifest, fsync, rename, `latest`). Read: verify_checkpoint with
// hashes (reads every byte) and loading every tensor of model.safetensors into memory (a copy out of
// the mapping, as a trainer's weight load does). Peer: `dd`
// writing the same number of bytes with conv=fsync, and reading them back. As root the page cache is
// dropped before each read (echo 3 > /proc/sys/vm/drop_caches) so reads come from the disk; otherwise
// the read numbers include the page cache and say so.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "engine/checkpoint/checkpoint.h"
#include "runtime/error.h"
#include "runtime/ops/random.h"
#include "runtime/safetensors.h"

using namespace wick;
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

bool drop_caches() {
  ::sync();
  std::ofstream out("/proc/sys/vm/drop_caches");
  if (!out) return false;
  out << "3\n";
  return static_cast<bool>(out.flush());
}

double timed_system(const std::string& command) {
  auto start = Clock::now();
  int status = std::system(command.c_str());
  WICK_CHECK(status == 0, "checkpoint_io_bench: `", command, "` failed with status ", status);
  return seconds_since(start);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t mib = 512;
  std::string base = fs::temp_directory_path().string();
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--mib")) mib = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--dir")) base = argv[i + 1];
  }
  try {
    fs::path root = fs::path(base) / ("wick_checkpoint_io_bench_" + std::to_string(::getpid()));
    fs::create_directories(root);
    const int64_t n_tensors = 64, per_tensor = mib * (1 << 20) / 4 / n_tensors;
    const double bytes = static_cast<double>(n_tensors * per_tensor * 4);
    NamedTensors model;
    for (int64_t i = 0; i < n_tensors; ++i)
      model.emplace_back("blocks." + std::to_string(i) + ".weight",
                         randn({per_tensor}, derive_stream(1, static_cast<uint64_t>(i), 0, RngPurpose::Test)));

    auto start = Clock::now();
    fs::path dir;
    {
      CheckpointWriter writer(root, 100);
      writer.write_model(model);
      dir = writer.commit(1, "bench");
    }
    const double write_s = seconds_since(start);

    const bool cold = drop_caches();
    start = Clock::now();
    CheckpointReport report = verify_checkpoint(dir, /*check_hashes=*/true);
    WICK_CHECK(report.valid(), "checkpoint_io_bench: the checkpoint does not verify: ", report.describe());
    const double verify_s = seconds_since(start);
    if (cold) drop_caches();
    start = Clock::now();
    {
      SafetensorsFile file = SafetensorsFile::open((dir / "model.safetensors").string());
      double checksum = 0;
      for (const std::string& name : file.names()) checksum += file.get(name).clone().data_as<float>()[0];
      if (checksum == 12345.678) std::printf(" ");  // keep the loads
    }
    const double load_s = seconds_since(start);

    const std::string dd_file = (root / "dd.bin").string();
    const double dd_write_s = timed_system("dd if=/dev/zero of=" + dd_file + " bs=1M count=" + std::to_string(mib) +
                                           " conv=fsync status=none");
    if (cold) drop_caches();
    const double dd_read_s = timed_system("dd if=" + dd_file + " of=/dev/null bs=1M status=none");

    auto mbps = [&](double s) { return bytes / s / 1e6; };
    std::printf("checkpoint_io_bench: %lld MiB model, %s, reads %s\n\n", static_cast<long long>(mib), root.c_str(),
                cold ? "after dropping the page cache" : "possibly from the page cache (not root)");
    std::printf("| operation | seconds | MB/s | of dd |\n|---|---|---|---|\n");
    std::printf("| dd write (conv=fsync) | %.2f | %.0f | 1.00 |\n", dd_write_s, mbps(dd_write_s));
    std::printf("| checkpoint write (safetensors + SHA-256 + manifest + fsync + rename) | %.2f | %.0f | %.2f |\n",
                write_s, mbps(write_s), dd_write_s / write_s);
    std::printf("| dd read | %.2f | %.0f | 1.00 |\n", dd_read_s, mbps(dd_read_s));
    std::printf("| checkpoint verify (SHA-256 of every byte) | %.2f | %.0f | %.2f |\n", verify_s, mbps(verify_s),
                dd_read_s / verify_s);
    std::printf("| checkpoint load (every tensor into memory) | %.2f | %.0f | %.2f |\n", load_s, mbps(load_s),
                dd_read_s / load_s);
    fs::remove_all(root);
  } catch (const WickError& e) {
    std::fprintf(stderr, "checkpoint_io_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
