// PreemptionWatch: async-signal-safe handlers (a flag, write(2), sigaction, raise) for SIGTERM, SIGUSR1 and SIGINT.
#include "engine/train/preemption.h"

#include <errno.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>

#include "runtime/error.h"

namespace wick {
namespace {

constexpr int kSignals[] = {SIGTERM, SIGUSR1, SIGINT};
constexpr int kSlots = 3;

// The first signal received, 0 before. Atomic, not a volatile sig_atomic_t: the kernel runs the handler on any thread
// that does not block the signal (the prefetcher's loader, parallel_for's helpers, Open MPI's progress thread), and
// the training thread reads the flag (ThreadSanitizer reported the volatile one as a data race). Lock-free, so
// async-signal-safe.
std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);
std::atomic<bool> g_installed{false};
struct sigaction g_previous[kSlots];
// Formatted before installation, one per signal: the first signal's and a second signal's lines.
char g_first[kSlots][640], g_second[kSlots][256];
size_t g_first_length[kSlots], g_second_length[kSlots];

int slot_of(int signal_number) { return signal_number == SIGTERM ? 0 : signal_number == SIGUSR1 ? 1 : 2; }

void write_all(const char* text, size_t length) {
  while (length > 0) {
    const ssize_t n = ::write(STDERR_FILENO, text, length);
    if (n <= 0) return;
    text += n;
    length -= static_cast<size_t>(n);
  }
}

void on_stop_signal(int signal_number) {
  const int saved_errno = errno;  // write(2) may set it under the code the signal interrupted
  const int slot = slot_of(signal_number);
  int none = 0;
  if (g_signal.compare_exchange_strong(none, signal_number)) {
    write_all(g_first[slot], g_first_length[slot]);
    errno = saved_errno;
    return;
  }
  // A second signal: stop now, by the signal's own default action (the exit status says which).
  write_all(g_second[slot], g_second_length[slot]);
  struct sigaction fallback;
  std::memset(&fallback, 0, sizeof(fallback));
  fallback.sa_handler = SIG_DFL;
  sigemptyset(&fallback.sa_mask);
  ::sigaction(signal_number, &fallback, nullptr);
  ::raise(signal_number);  // delivered when this handler returns
  errno = saved_errno;
}

// snprintf's return value -> the length of what it wrote into `capacity` bytes.
size_t written_length(int n, size_t capacity) { return n < 0 ? 0 : std::min(static_cast<size_t>(n), capacity - 1); }

}  // namespace

const char* stop_signal_name(int signal_number) {
  if (signal_number == SIGTERM) return "SIGTERM";
  if (signal_number == SIGUSR1) return "SIGUSR1";
  if (signal_number == SIGINT) return "SIGINT";
  static thread_local char text[32];
  std::snprintf(text, sizeof text, "signal %d", signal_number);
  return text;
}

PreemptionWatch::PreemptionWatch(int rank, int world) {
  WICK_CHECK(!g_installed.exchange(true), "PreemptionWatch: only one watch may be installed at a time");
  g_signal.store(0);
  const int pid = static_cast<int>(::getpid());
  for (int signal_number : kSignals) {
    const int slot = slot_of(signal_number);
    const char* name = signal_number == SIGINT ? "SIGINT (Ctrl-C)" : stop_signal_name(signal_number);
    const char* launcher_note =
        signal_number == SIGTERM && world > 1
            ? " (mpirun and srun also send SIGTERM to every rank when a rank died or the job was cancelled; "
              "their own message then says so)"
            : "";
    g_first_length[slot] = written_length(
        std::snprintf(g_first[slot], sizeof g_first[slot],
                      "wick: rank %d of %d (pid %d) got %s: finishing the current step, then a checkpoint and exit "
                      "status %d; a second signal stops at once%s\n",
                      rank, world, pid, name, kExitPreempted, launcher_note),
        sizeof g_first[slot]);
    g_second_length[slot] = written_length(
        std::snprintf(g_second[slot], sizeof g_second[slot],
                      "wick: rank %d of %d (pid %d) got a second stop signal (%s): stopping at once; a checkpoint "
                      "being written is left unfinished (never resumed from), `latest` names a complete one\n",
                      rank, world, pid, name),
        sizeof g_second[slot]);
    struct sigaction action;
    std::memset(&action, 0, sizeof(action));
    action.sa_handler = on_stop_signal;
    sigemptyset(&action.sa_mask);
    for (int other : kSignals) sigaddset(&action.sa_mask, other);  // one handler runs at a time
    action.sa_flags = SA_RESTART;
    // A process started with SIGINT ignored (a background job of a shell without job control, nohup) keeps
    // ignoring it, as shells expect: Ctrl-C in that terminal is not meant for it.
    ::sigaction(signal_number, nullptr, &g_previous[slot]);
    if (signal_number == SIGINT && g_previous[slot].sa_handler == SIG_IGN) continue;
    ::sigaction(signal_number, &action, nullptr);
  }
}

PreemptionWatch::~PreemptionWatch() {
  for (int signal_number : kSignals) ::sigaction(signal_number, &g_previous[slot_of(signal_number)], nullptr);
  g_installed.store(false);
}

int PreemptionWatch::signal_number() { return g_signal.load(); }

bool PreemptionWatch::installed() { return g_installed.load(); }

}  // namespace wick
