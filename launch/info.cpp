// `wick info`: version, git commit, build type, compiled features and library versions, and the
// devices this process can see.
#include <cstdio>
#include <string>

#include "launch/commands.h"
#include "models/registry.h"
#include "runtime/cuda/cuda_api.h"
#include "runtime/cpu/parallel.h"
#include "runtime/device.h"
#include "runtime/memory.h"
#include "wick/build_info.h"

#include <cblas.h>
#if WICK_HAS_MPI
#include <mpi.h>
#endif
#if WICK_HAS_HDF5
#include <hdf5.h>
#endif

namespace wick::launch {
namespace {

std::string or_none(const std::string& text) { return text.empty() ? "not built" : text; }

void print_info() {
  std::printf("wick %s (commit %s, %s build, %s)\n", WICK_VERSION, WICK_GIT_COMMIT, WICK_BUILD_TYPE,
              WICK_CXX_COMPILER);
  std::printf("\nfeatures\n");
  std::printf("  cpu:      OpenMP, %d threads; OpenBLAS %s; wick's kernels built for %s\n", cpu::max_threads(),
              openblas_get_config(), *WICK_CPU_ARCH ? WICK_CPU_ARCH : "the compiler's default ISA");
  std::printf("  cuda:     %s\n", cuda::compiled() ? ("runtime " + cuda::runtime_version_string() + ", archs " +
                                                     cuda::compiled_architectures()).c_str()
                                                  : "not built");
  std::printf("  cublas:   %s\n", or_none(cuda::cublas_version_string()).c_str());
  std::printf("  cudnn:    %s\n", or_none(cuda::cudnn_version_string()).c_str());
  std::printf("  nccl:     %s\n", or_none(cuda::nccl_version_string()).c_str());
#if WICK_HAS_MPI
  char mpi_version[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  MPI_Get_library_version(mpi_version, &length);
  std::string mpi(mpi_version, static_cast<size_t>(length));
  if (auto comma = mpi.find(','); comma != std::string::npos) mpi = mpi.substr(0, comma);
  std::printf("  mpi:      %s (MPI %d.%d)\n", mpi.c_str(), MPI_VERSION, MPI_SUBVERSION);
#else
  std::printf("  mpi:      not built\n");
#endif
#if WICK_HAS_HDF5
  unsigned major = 0, minor = 0, release = 0;
  H5get_libversion(&major, &minor, &release);
  std::printf("  hdf5:     %u.%u.%u\n", major, minor, release);
#else
  std::printf("  hdf5:     not built\n");
#endif

  std::printf("\nmodels\n");
  for (const Architecture* arch : architectures()) {
    std::string aliases;
    for (const std::string& alias : arch->schema().aliases) aliases += (aliases.empty() ? "" : ", ") + alias;
    std::printf("  %-9s model.arch: %s%s%s\n", arch->name().c_str(), arch->name().c_str(),
                arch->schema().flag.empty() ? "" : (" (or " + arch->schema().flag + ": true)").c_str(),
                aliases.empty() ? "" : ("; also " + aliases).c_str());
  }

  std::printf("\ndevices\n");
  MemoryStats host = memory_stats(Device::cpu());
  std::printf("  cpu       %d threads, wick holds %.1f MiB (peak %.1f MiB)\n", cpu::max_threads(),
              host.current_bytes / 1048576.0, host.peak_bytes / 1048576.0);
  int n_cuda = cuda_device_count();
  if (!cuda::compiled()) {
    std::printf("  cuda      none (built without CUDA)\n");
  } else if (n_cuda == 0) {
    std::printf("  cuda      none visible (no driver or no GPU on this machine)\n");
  }
  for (int i = 0; i < n_cuda; ++i) {
    CudaDeviceInfo info = cuda_device_info(i);
    std::printf("  cuda:%d    %s, sm_%d%d, %.1f GiB (%.1f GiB free), driver %d.%d\n", i, info.name.c_str(),
                info.compute_major, info.compute_minor, info.total_bytes / 1073741824.0,
                info.free_bytes / 1073741824.0, info.driver_version / 1000, (info.driver_version % 1000) / 10);
  }
}

}  // namespace

void add_info_command(CLI::App& app) {
  CLI::App* info = app.add_subcommand("info", "Print version, build features and visible devices");
  info->callback([] { print_info(); });
}

}  // namespace wick::launch
