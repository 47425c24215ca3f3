// The checking macro for NCCL calls, of the family in runtime/error.h and runtime/cuda/cuda_check.h:
// a failed call throws WickError(Runtime) naming the call, NCCL's reason and file:line. Include only
// from translation units built with NCCL (WICK_HAS_NCCL).
//
//   NCCL_CHECK(ncclGetUniqueId(&id));
//
// Calls whose failure must abort the communicator first (the collectives, ncclCommInitRankConfig)
// go through NcclGroup::State instead; destructors call NCCL unchecked (they never throw).
#pragma once

#include <nccl.h>

#include "runtime/error.h"

#define NCCL_CHECK(call)                                                                          \
  do {                                                                                            \
    ncclResult_t wick_status_ = (call);                                                           \
    if (wick_status_ != ncclSuccess)                                                              \
      ::wick::detail::throw_error(::wick::ErrorKind::Runtime, __FILE__, __LINE__,                 \
                                  ::wick::detail::concat(#call, " failed: ",                      \
                                                         ncclGetErrorString(wick_status_)));      \
  } while (0)
