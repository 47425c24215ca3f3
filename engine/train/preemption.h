// Preemption: SIGTERM or SIGUSR1 (Slurm's `--signal=USR1@120`; mpirun forwards SIGUSR1 to every
// rank), or SIGINT (Ctrl-C on a process run without mpirun, which turns Ctrl-C into SIGTERM itself), asks a
// training run to stop after the current step with a checkpoint (docs/distributed.md "Preemption").
//
//   PreemptionWatch watch(rank, world);   // installs the handlers; the destructor restores the old ones
//   ... each step: stop = all_reduce_sum(group, {..., watch.requested() ? 1.0 : 0.0});
//   if (stop) { save(step); return preempted; }   // `wick train` then exits with kExitPreempted
//
// The first signal only sets a flag and writes one line to stderr; the step loop sums the flag over
// the ranks with the step's loss, so every rank stops after the same step even when one rank alone
// got the signal. A second signal (either kind) ends the process at once by that signal's default
// action: a checkpoint being written is left as a staging directory that is never resumed from, and
// `latest` keeps naming the previous one (or, past the save's rename, the new complete one;
// docs/checkpoints.md, the atomicity protocol).
#pragma once

namespace wick {

// `wick train`'s exit status after a requested stop with its checkpoint written: EX_TEMPFAIL of
// sysexits.h ("temporary failure, the user is invited to retry"), which no failure of wick (2, 3, 4)
// and no death by a signal (128 + n, as shells report it) can be taken for.
inline constexpr int kExitPreempted = 75;

class PreemptionWatch {
 public:
  // Installs handlers for SIGTERM, SIGUSR1 and SIGINT (one watch at a time; rank and world go into the
  // messages, formatted here: the handler only writes them).
  PreemptionWatch(int rank, int world);
  // Restores the handlers that were there before (the launcher's SIGTERM notice, or the defaults).
  ~PreemptionWatch();
  PreemptionWatch(const PreemptionWatch&) = delete;
  PreemptionWatch& operator=(const PreemptionWatch&) = delete;

  // The first signal that asked this process to stop (SIGTERM, SIGUSR1 or SIGINT) since the installed watch was
  // made, 0 when none has (or none is installed).
  static int signal_number();
  static bool requested() { return signal_number() != 0; }
  // Whether a watch is installed: `wick train` installs one as soon as its process group exists, so that a
  // signal while the data and the model load is kept until step 1 ends (the step loop then uses that one).
  static bool installed();
};

// "SIGTERM", "SIGUSR1", "SIGINT", otherwise "signal <n>".
const char* stop_signal_name(int signal_number);

}  // namespace wick
