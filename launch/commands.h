// Subcommands of the `wick` program. Each add_*_command registers its options and a callback on
// the CLI11 app; the callback sets the exit status it wants through set_exit_status.
#pragma once

#include <functional>
#include <string>

#include <CLI/CLI.hpp>

#include "runtime/error.h"

namespace wick::launch {

void add_info_command(CLI::App& app);
void add_dataset_command(CLI::App& app);
void add_checkpoint_command(CLI::App& app);  // launch/checkpoint_cmd.cpp
void add_example_command(CLI::App& app);
void add_sample_command(CLI::App& app);  // launch/sample_cmd.cpp
void add_eval_command(CLI::App& app);    // launch/eval_cmd.cpp
void add_train_command(CLI::App& app);       // launch/train_cmd.cpp
void add_ranks_command(CLI::App& app);       // launch/ranks_cmd.cpp
void add_encode_prompt_command(CLI::App& app);  // launch/encode_prompt_cmd.cpp
void add_presets_command(CLI::App& app);        // launch/presets_cmd.cpp
void add_dataset_encode_command(CLI::App& dataset);  // launch/dataset_encode_cmd.cpp: `wick dataset encode`

int exit_status();
void set_exit_status(int status);
// The exit status of an error: 2 Usage / Config, 3 Data, 4 anything else (a failure during a run).
int exit_status_for(ErrorKind kind);
// Runs a command's `body`; a WickError (its kind's status) or another std::exception (status 4) is printed as
// "wick: error<where()>: <what>" on stderr and becomes the exit status; under mpirun the whole job ends with it
// (comm::exit_after_failure), so no rank waits for a peer that failed. launch/exit_status.cpp.
void report_errors(const std::function<void()>& body, const std::function<std::string()>& where = {});

}  // namespace wick::launch
