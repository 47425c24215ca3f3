// The `wick` command-line program. Subcommands live in launch/<name>.cpp and register here.
//
//   wick info        version, build, compiled features, visible devices
//   wick ranks       under mpirun/srun: each rank's node, local rank and GPU, and an all-reduce
//   wick example     small end-to-end trainings (fashion-mlp, fashion-cnn)
//   wick encode-prompt  Flux / SD3 / SDXL prompt embeddings from their text encoders
//
// Exit status: 0 success; 2 bad command line or config; 3 bad data, checkpoint or weights file;
// 4 a failure during training. Errors are printed as one line on stderr, never as a crash.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "launch/commands.h"
#include "runtime/error.h"

int main(int argc, char** argv) {
  CLI::App app{"wick: training for diffusion models (LoRA, DoRA, full) on CPU and CUDA"};
  app.require_subcommand(1);
  wick::launch::add_info_command(app);
  wick::launch::add_dataset_command(app);
  wick::launch::add_checkpoint_command(app);
  wick::launch::add_example_command(app);
  wick::launch::add_sample_command(app);
  wick::launch::add_eval_command(app);
  wick::launch::add_train_command(app);
  wick::launch::add_ranks_command(app);
  wick::launch::add_encode_prompt_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    int status = app.exit(error);
    return status == 0 ? 0 : 2;
  } catch (const wick::WickError& error) {
    std::fprintf(stderr, "wick: error: %s\n", error.what());
    return wick::launch::exit_status_for(error.kind());
  } catch (const std::exception& error) {
    std::fprintf(stderr, "wick: error: %s\n", error.what());
    return 4;
  }
  return wick::launch::exit_status();
}
