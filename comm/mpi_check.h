// The checking macro for MPI calls, of the family in runtime/error.h and runtime/cuda/cuda_check.h:
// a failed call throws WickError(Runtime) naming the call, MPI's error string and file:line. Include
// only from translation units built with MPI (WICK_HAS_MPI); the communicators must return errors
// (MPI_ERRORS_RETURN) rather than abort for the check to see them.
//
//   MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
//
// A collective that fails after it started marks the group failed first (comm/mpi_group.cpp), so
// it does not use the macro; destructors call MPI unchecked (they never throw).
#pragma once

#include <mpi.h>

#include <string>

#include "runtime/error.h"

namespace wick::comm {

// MPI's text for an error code ("MPI error <code>" when MPI has none).
inline std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return detail::concat("MPI error ", code);
  return std::string(text, static_cast<size_t>(length));
}

}  // namespace wick::comm

#define MPI_CHECK(call)                                                                           \
  do {                                                                                            \
    int wick_status_ = (call);                                                                    \
    if (wick_status_ != MPI_SUCCESS)                                                              \
      ::wick::detail::throw_error(                                                                \
          ::wick::ErrorKind::Runtime, __FILE__, __LINE__,                                         \
          ::wick::detail::concat(#call, " failed: ",                                              \
                                 ::wick::comm::mpi_error_string(wick_status_)));                  \
  } while (0)
