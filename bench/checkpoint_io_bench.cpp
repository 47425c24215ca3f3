// Checkpoint write and read throughput against the disk's sequential bandwidth measured with dd.
//
//   build/bench/checkpoint_io_bench [--mib 512] [--optimizer-mib 0] [--dir /tmp]
//
// Write: CheckpointWriter with one model.safetensors of --mib MiB of f32 tensors (64 tensors; with
// --optimizer-mib also an optimizer.safetensors of that size), then commit (manifest, fsync, rename,
// `latest`), in two ways in the same run: one pass (each file hashed while it is written, what
// CheckpointWriter does) and two passes (the files written without a digest, so commit reads them
// back to hash them: what it did before). Read: verify_checkpoint with hashes (every byte, files in
// parallel; with two files also one after another, as before); loading every tensor of the files (a copy out of the mapping, as a trainer's weight
// load does); and a whole resume both ways: two passes (verify_checkpoint, then open and load the
// files: before) and one pass (CheckpointFiles::verify, then load from the mapping it hashed).
// Peer: `dd` writing the same number of bytes with conv=fsync, and reading them back. As root the
// page cache is dropped before each read (echo 3 > /proc/sys/vm/drop_caches) so reads come from the
// disk; otherwise the read numbers include the page cache and say so.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/checkpoint_files.h"
#include "engine/checkpoint/sha256.h"
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

NamedTensors random_tensors(const std::string& prefix, int64_t mib, uint64_t seed) {
  const int64_t n_tensors = 64, per_tensor = mib * (1 << 20) / 4 / n_tensors;
  NamedTensors out;
  for (int64_t i = 0; i < n_tensors; ++i)
    out.emplace_back(prefix + std::to_string(i) + ".weight",
                     randn({per_tensor}, derive_stream(seed, static_cast<uint64_t>(i), 0, RngPurpose::Test)));
  return out;
}

// Copies every tensor out of the file (what loading weights into parameters costs).
double load_all(const SafetensorsFile& file) {
  double checksum = 0;
  for (const std::string& name : file.names()) checksum += file.get(name).clone().data_as<float>()[0];
  return checksum;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t mib = 512, optimizer_mib = 0;
  std::string base = fs::temp_directory_path().string();
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--mib")) mib = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--optimizer-mib")) optimizer_mib = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--dir")) base = argv[i + 1];
  }
  try {
    fs::path root = fs::path(base) / ("wick_checkpoint_io_bench_" + std::to_string(::getpid()));
    fs::create_directories(root);
    NamedTensors model = random_tensors("blocks.", mib, 1);
    NamedTensors optimizer = optimizer_mib > 0 ? random_tensors("state.", optimizer_mib, 2) : NamedTensors{};
    std::vector<std::string> files = {"model.safetensors"};
    if (optimizer_mib > 0) files.push_back("optimizer.safetensors");
    double bytes = 0;
    for (const NamedTensors* set : {&model, &optimizer})
      for (const auto& [name, tensor] : *set) bytes += static_cast<double>(tensor.nbytes());

    // Two passes (before): the files are written without a digest, so commit reads them back.
    drop_caches();
    auto start = Clock::now();
    {
      CheckpointWriter writer(root, 100);
      save_safetensors((writer.staging_dir() / "model.safetensors").string(), model);
      if (optimizer_mib > 0) save_safetensors((writer.staging_dir() / "optimizer.safetensors").string(), optimizer);
      writer.commit(1, "bench");
    }
    const double write_two_pass_s = seconds_since(start);
    // One pass: hashed while written.
    drop_caches();
    start = Clock::now();
    fs::path dir;
    {
      CheckpointWriter writer(root, 200);
      writer.write_model(model);
      if (optimizer_mib > 0) writer.write_optimizer_state(optimizer, OptimizerLayout{});
      dir = writer.commit(1, "bench");
    }
    const double write_s = seconds_since(start);

    const bool cold = drop_caches();
    start = Clock::now();
    CheckpointReport report = verify_checkpoint(dir, /*check_hashes=*/true);
    WICK_CHECK(report.valid(), "checkpoint_io_bench: the checkpoint does not verify: ", report.describe());
    const double verify_s = seconds_since(start);

    // The same hashes one file after another (what verify_checkpoint did before), with several files.
    double verify_serial_s = 0;
    if (files.size() > 1) {
      if (cold) drop_caches();
      start = Clock::now();
      for (const std::string& name : files) sha256_file((dir / name).string());
      verify_serial_s = seconds_since(start);
    }

    double checksum = 0;
    if (cold) drop_caches();
    start = Clock::now();
    for (const std::string& name : files) checksum += load_all(SafetensorsFile::open((dir / name).string()));
    const double load_s = seconds_since(start);

    if (cold) drop_caches();
    start = Clock::now();
    {
      WICK_CHECK(verify_checkpoint(dir).valid(), "checkpoint_io_bench: the checkpoint does not verify");
      for (const std::string& name : files) checksum += load_all(SafetensorsFile::open((dir / name).string()));
    }
    const double resume_two_pass_s = seconds_since(start);

    if (cold) drop_caches();
    start = Clock::now();
    {
      CheckpointFiles verified = CheckpointFiles::verify(dir);
      WICK_CHECK(verified.report().valid(), "checkpoint_io_bench: the checkpoint does not verify");
      for (const std::string& name : files) checksum += load_all(verified.safetensors(name));
    }
    const double resume_s = seconds_since(start);
    if (checksum == 12345.678) std::printf(" ");  // keep the loads

    const std::string dd_file = (root / "dd.bin").string();
    const int64_t dd_mib = mib + optimizer_mib;
    const double dd_write_s = timed_system("dd if=/dev/zero of=" + dd_file + " bs=1M count=" + std::to_string(dd_mib) +
                                           " conv=fsync status=none");
    if (cold) drop_caches();
    const double dd_read_s = timed_system("dd if=" + dd_file + " of=/dev/null bs=1M status=none");

    auto mbps = [&](double s) { return bytes / s / 1e6; };
    std::printf("checkpoint_io_bench: %lld MiB model", static_cast<long long>(mib));
    if (optimizer_mib > 0) std::printf(" + %lld MiB optimizer file", static_cast<long long>(optimizer_mib));
    std::printf(", %s, reads %s\n\n", root.c_str(),
                cold ? "after dropping the page cache" : "possibly from the page cache (not root)");
    std::printf("| operation | seconds | MB/s | of dd |\n|---|---|---|---|\n");
    auto row = [&](const char* what, double s, double dd_s) {
      std::printf("| %s | %.2f | %.0f | %.2f |\n", what, s, mbps(s), dd_s / s);
    };
    row("dd write (conv=fsync)", dd_write_s, dd_write_s);
    row("checkpoint write, two passes (write + fsync, read back for SHA-256, manifest, rename)", write_two_pass_s,
        dd_write_s);
    row("checkpoint write, one pass (SHA-256 while writing, manifest, rename)", write_s, dd_write_s);
    row("dd read", dd_read_s, dd_read_s);
    if (files.size() > 1) row("checkpoint verify, files one after another (before)", verify_serial_s, dd_read_s);
    row("checkpoint verify (SHA-256 of every byte, files in parallel)", verify_s, dd_read_s);
    row("checkpoint load (every tensor into memory)", load_s, dd_read_s);
    row("resume, two passes (verify, then load)", resume_two_pass_s, dd_read_s);
    row("resume, one pass (verify and load the same mapping)", resume_s, dd_read_s);
    fs::remove_all(root);
  } catch (const WickError& e) {
    std::fprintf(stderr, "checkpoint_io_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
