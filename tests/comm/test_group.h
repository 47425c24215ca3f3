// The process group wick_comm_tests was started with (set by its main in collectives_test.cpp):
// the MPI group under mpirun, else the single group.
#pragma once

#include <memory>

#include "comm/process_group.h"

extern std::shared_ptr<wick::comm::ProcessGroup> g_group;
