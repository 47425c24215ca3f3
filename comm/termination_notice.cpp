#include "comm/termination_notice.h"

#include <errno.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>

namespace wick::comm {
namespace {

char g_message[512];
size_t g_length = 0;
struct sigaction g_previous;

void on_sigterm(int signal_number) {
  const int saved_errno = errno;  // the previous handler may return: leave errno as the interrupted code had it
  ssize_t ignored = ::write(STDERR_FILENO, g_message, g_length);
  (void)ignored;
  ::sigaction(SIGTERM, &g_previous, nullptr);
  ::raise(signal_number);
  errno = saved_errno;
}

}  // namespace

void install_termination_notice(int rank, int size) {
  static std::once_flag installed;
  int n = std::snprintf(g_message, sizeof(g_message),
                        "wick: rank %d of %d (pid %d) stopped by SIGTERM from the launcher: it ends every rank "
                        "when one rank died (its message names that rank) or the job was cancelled. For the "
                        "survivors to name a dead rank and exit with status 4 themselves, launch with "
                        "`mpirun --mca orte_abort_on_non_zero_status 0` (docs/distributed.md)\n",
                        rank, size, static_cast<int>(::getpid()));
  g_length = n < 0 ? 0 : std::min(static_cast<size_t>(n), sizeof(g_message) - 1);
  std::call_once(installed, [] {
    struct sigaction action;
    std::memset(&action, 0, sizeof(action));
    action.sa_handler = on_sigterm;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGTERM, &action, &g_previous);
  });
}

}  // namespace wick::comm
