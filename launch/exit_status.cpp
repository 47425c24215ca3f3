#include <cstdio>
#include <exception>

#include "comm/launch_env.h"
#include "launch/commands.h"
#include "runtime/utf8.h"

namespace wick::launch {
namespace {

int status_ = 0;

// Prints the error (bytes of a damaged file it quotes escaped: runtime/utf8.h) and ends with `status`: the whole job
// under mpirun, else this command's exit status.
void fail(const std::string& where, const char* what, int status) {
  std::fprintf(stderr, "wick: error%s: %s\n", where.c_str(), printable_utf8(what).c_str());
  if (comm::mpi_initialized()) comm::exit_after_failure(status);
  set_exit_status(status);
}

}  // namespace

int exit_status() { return status_; }
void set_exit_status(int status) { status_ = status; }
int exit_status_for(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::Usage:
    case ErrorKind::Config: return 2;
    case ErrorKind::Data: return 3;
    default: return 4;
  }
}

void report_errors(const std::function<void()>& body, const std::function<std::string()>& where) {
  try {
    body();
  } catch (const WickError& error) {
    fail(where ? where() : std::string(), error.what(), exit_status_for(error.kind()));
  } catch (const std::exception& error) {
    fail(where ? where() : std::string(), error.what(), 4);
  }
}

}  // namespace wick::launch
