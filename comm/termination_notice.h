// A one-line notice when the launcher ends this rank with SIGTERM.
//
//   comm::install_termination_notice(rank, size);   // make_process_group does this under a launcher
//
// mpirun (Open MPI 4.1, by default) and srun end every rank with SIGTERM as soon as one rank dies
// (kill -9, a crash, the OOM killer) or the job is cancelled, before wick's collective timeout can
// name the lost rank; without a notice the survivors vanish silently. The handler writes
// "wick: rank R of N (pid P) stopped by SIGTERM from the launcher: ..." to stderr, then restores
// the previous disposition and raises SIGTERM again, so the process still ends the way the launcher
// meant (and a handler the MPI library had installed still runs). See docs/distributed.md ("A rank
// that dies").
#pragma once

namespace wick::comm {

// Installs the SIGTERM handler (once; later calls update rank and size). Async-signal-safe: the
// message is formatted here, the handler only writes it.
void install_termination_notice(int rank, int size);

}  // namespace wick::comm
