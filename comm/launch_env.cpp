#include "comm/launch_env.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "comm/mpi_group.h"
#include "comm/nccl_group.h"
#include "comm/single_group.h"
#include "comm/termination_notice.h"
#include "runtime/error.h"

#if WICK_HAS_MPI
#include <mpi.h>
#endif

namespace wick::comm {
namespace {

const char* env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && value[0] != '\0' ? value : nullptr;
}

int env_int(const char* name, int fallback) {
  const char* value = env(name);
  if (value == nullptr) return fallback;
  char* end = nullptr;
  long parsed = std::strtol(value, &end, 10);
  return end != value && *end == '\0' ? static_cast<int>(parsed) : fallback;
}

std::atomic<bool> g_comm_failed{false};
std::atomic<int> g_thread_level{-1};

#if WICK_HAS_MPI
void finalize_mpi_at_exit() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  // After a lost peer MPI_Finalize would wait for it; leave without (the launcher cleans up).
  if (initialized && !finalized && !g_comm_failed.load()) MPI_Finalize();
}
#endif

}  // namespace

LaunchEnv detect_launch_env() {
  LaunchEnv e;
  auto set = [&](const char* launcher, int size, int rank, int local_rank) {
    e.launched = true;
    e.launcher = launcher;
    e.world_size = size;
    e.rank = rank;
    e.local_rank = local_rank;
  };
  if (env("OMPI_COMM_WORLD_SIZE")) {
    set("Open MPI (mpirun)", env_int("OMPI_COMM_WORLD_SIZE", 1), env_int("OMPI_COMM_WORLD_RANK", 0),
        env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0));
  } else if (env("PMIX_RANK")) {
    // srun --mpi=pmix sets PMIX_RANK and the SLURM_* variables; prterun sets PMIX_RANK.
    set("PMIx", env_int("PMIX_SIZE", env_int("SLURM_NTASKS", 1)), env_int("PMIX_RANK", 0),
        env_int("SLURM_LOCALID", env_int("PMIX_LOCAL_RANK", 0)));
  } else if (env("PMI_SIZE")) {
    set("PMI", env_int("PMI_SIZE", 1), env_int("PMI_RANK", 0),
        env_int("MPI_LOCALRANKID", env_int("SLURM_LOCALID", 0)));
  } else if (env("MV2_COMM_WORLD_SIZE")) {
    set("MVAPICH", env_int("MV2_COMM_WORLD_SIZE", 1), env_int("MV2_COMM_WORLD_RANK", 0),
        env_int("MV2_COMM_WORLD_LOCAL_RANK", 0));
  } else if (env("SLURM_STEP_ID") && env("SLURM_PROCID") && env_int("SLURM_NTASKS", 1) > 1) {
    // A task of an srun step with several tasks: Slurm's default MPI plugin connects MPI_Init.
    set("Slurm (srun)", env_int("SLURM_NTASKS", 1), env_int("SLURM_PROCID", 0), env_int("SLURM_LOCALID", 0));
  } else {
    e.launcher = "none";
  }
  return e;
}

bool mpi_initialized() {
#if WICK_HAS_MPI
  int initialized = 0;
  MPI_Initialized(&initialized);
  return initialized != 0;
#else
  return false;
#endif
}

int mpi_thread_level() { return g_thread_level.load(); }

void init_mpi() {
#if WICK_HAS_MPI
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  if (mpi_initialized()) return;
  int provided = 0;
  int code = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  WICK_CHECK_KIND(Runtime, code == MPI_SUCCESS, "MPI_Init_thread failed with code ", code);
  g_thread_level.store(provided);
  std::atexit(finalize_mpi_at_exit);
  WICK_CHECK_KIND(Runtime, provided >= MPI_THREAD_SERIALIZED, "MPI_Init_thread: MPI provides thread level ",
                  provided, ", wick needs at least MPI_THREAD_SERIALIZED");
#else
  WICK_FAIL(Config, "this process was started by a launcher (mpirun/srun) but wick was built without MPI "
                    "(install libopenmpi-dev and openmpi-bin, see scripts/install_deps.sh, and rebuild)");
#endif
}

std::shared_ptr<ProcessGroup> make_process_group(const std::string& backend, Device device, double timeout_s,
                                                 bool node_only) {
  if (backend != "auto" && backend != "nccl" && backend != "mpi" && backend != "none")
    WICK_FAIL(Config, "distributed.backend: unknown backend '", backend, "'; valid: auto, nccl, mpi, none");
  if (backend == "nccl" && !device.is_cuda())
    WICK_FAIL(Config, "distributed.backend: nccl needs a CUDA device, the run uses ", device.str(),
              " (use mpi or auto)");
  LaunchEnv launch = detect_launch_env();
  if (!launch.launched || launch.world_size <= 1) {
    // World size 1: MPI is never initialized. An explicit nccl still gets an NCCL communicator (of
    // one rank, its id made locally), so the NCCL paths run on a single GPU.
    if (backend == "nccl") return std::make_shared<NcclGroup>(device, timeout_s);
    return std::make_shared<SingleGroup>(device, timeout_s);
  }
  if (backend == "none")
    WICK_FAIL(Config, "distributed.backend: none, but ", launch.launcher, " started ", launch.world_size,
              " ranks; use auto, mpi or nccl");
  init_mpi();
  auto mpi = std::make_shared<MpiGroup>(timeout_s, node_only);
  if (!node_only) install_termination_notice(mpi->rank(), mpi->size());
  bool use_nccl = backend == "nccl" || (backend == "auto" && device.is_cuda());
  if (!use_nccl) {
    WICK_CHECK_KIND(Config, device.is_cpu() || backend == "mpi", "distributed.backend: internal choice error");
    return mpi;
  }
  return std::make_shared<NcclGroup>(mpi, timeout_s);
}

void mark_comm_failed() { g_comm_failed.store(true); }

void exit_after_failure(int status) {
  std::fflush(stdout);
  std::fflush(stderr);
#if WICK_HAS_MPI
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (mpi_initialized() && !finalized) {
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > 1) MPI_Abort(MPI_COMM_WORLD, status);
  }
#endif
  _exit(status);
}

}  // namespace wick::comm
