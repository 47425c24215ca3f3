// How this process was started, and the process group that follows from it.
//
//   comm::LaunchEnv env = comm::detect_launch_env();   // reads environment variables only
//   auto group = comm::make_process_group("auto", Device::cpu(), /*timeout_s=*/300);
//   ...
//   catch (const WickError& e) { ...; comm::exit_after_failure(4); }   // never hangs on a lost peer
//
// Without a launcher the world size is 1 and MPI is never initialized (make_process_group returns
// a SingleGroup, or for an explicit "nccl" an NCCL group of one rank). Under mpirun/srun, MPI is
// initialized once with MPI_Init_thread (MPI_THREAD_MULTIPLE requested, MPI_THREAD_SERIALIZED
// required: wick serializes its MPI calls) and finalized at exit. See docs/distributed.md.
#pragma once

#include <memory>
#include <string>

#include "comm/process_group.h"

namespace wick::comm {

struct LaunchEnv {
  bool launched = false;  // started by mpirun / srun / another PMI launcher
  std::string launcher;   // "none", "Open MPI (mpirun)", "PMIx", "PMI", "MVAPICH", "Slurm (srun)"
  int world_size = 1;     // from the launcher's environment (MPI's own answer wins once initialized)
  int rank = 0;
  int local_rank = 0;
};

// Reads OMPI_COMM_WORLD_{SIZE,RANK,LOCAL_RANK} (Open MPI), PMIX_RANK (+ PMIX_SIZE / SLURM_NTASKS,
// srun --mpi=pmix, prterun), PMI_SIZE/PMI_RANK (MPICH hydra, srun --mpi=pmi2), MV2_COMM_WORLD_*
// (MVAPICH) and, for a Slurm step, SLURM_STEP_ID + SLURM_PROCID + SLURM_NTASKS.
LaunchEnv detect_launch_env();

// MPI_Initialized (false in a build without MPI).
bool mpi_initialized();
// Initializes MPI once (later calls do nothing) and registers MPI_Finalize at exit; throws
// WickError(Config) in a build without MPI, WickError(Runtime) if MPI gives less than
// MPI_THREAD_SERIALIZED.
void init_mpi();
// The thread level MPI provided (MPI_THREAD_* value), -1 before init_mpi().
int mpi_thread_level();

// backend: "auto" (NCCL for a CUDA device, MPI for the CPU, under a launcher), "nccl", "mpi" or
// "none" (SingleGroup; an error under a launcher with more than one rank). Unknown names throw
// WickError(Config) listing the valid ones. Without a launcher (or with one rank) MPI stays
// uninitialized and every backend gives a SingleGroup, except "nccl": an NcclGroup of one rank on
// `device`, so the NCCL collectives, streams and watchdog run on a single GPU. With NCCL on
// several ranks the GPU is the node-local rank (modulo the visible devices): the index of
// `device` is ignored; group->device() says which GPU was taken. node_only: a group of this rank's node
// only (its ranks in world order; the world's group must exist already: it installs the launcher notices).
std::shared_ptr<ProcessGroup> make_process_group(const std::string& backend, Device device, double timeout_s,
                                                 bool node_only = false);

// Ends the process after a failure with `status` (4 for a lost peer) without hanging: flushes
// stdout/stderr, then MPI_Abort(MPI_COMM_WORLD, status) when MPI is initialized with several ranks
// (so hung peers are killed too; mpirun exits with `status`), else _exit(status).
[[noreturn]] void exit_after_failure(int status);

// Set by a group that hit a timeout: MPI_Finalize at exit is skipped (it would wait for the lost peer).
void mark_comm_failed();

}  // namespace wick::comm
