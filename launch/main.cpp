// The `wick` command-line program. Subcommands live in launch/<name>.cpp and register here.
//
//   wick info        version, build, compiled features, visible devices
//   wick ranks       under mpirun/srun: each rank's node, local rank and GPU, and an all-reduce
//   wick example     small end-to-end trainings (fashion-mlp, fashion-cnn)
//   wick encode-prompt  Flux / SD3 / SDXL prompt embeddings from their text encoders
//   wick presets     an architecture's LoRA target presets (and, for a config, the layers each matches)
//   wick --version   one line: version and commit
//
// Exit status: 0 success; 2 bad command line or config; 3 bad data, checkpoint or weights file;
// 4 a failure during training. Errors are printed as one line on stderr, never as a crash.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "launch/commands.h"
#include "runtime/error.h"
#include "runtime/utf8.h"
#include "wick/build_info.h"

namespace {

// Levenshtein distance: "trian" is 2 from "train".
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The first argument when it is a word that names no command (CLI11 would only say "A subcommand is required"):
// exit 2 naming it, the nearest command when one is close, and the list.
int refuse_unknown_command(const CLI::App& app, const std::string& word) {
  std::string names, nearest;
  size_t best = 3;  // suggest only within two edits
  for (const CLI::App* command : app.get_subcommands({})) {
    const std::string& name = command->get_name();
    names += (names.empty() ? "" : ", ") + name;
    const size_t distance = edit_distance(word, name);
    if (distance < best) best = distance, nearest = name;
  }
  std::fprintf(stderr, "wick: error: '%s' is not a wick command%s (commands: %s; wick --help)\n", word.c_str(),
               nearest.empty() ? "" : ("; did you mean '" + nearest + "'?").c_str(), names.c_str());
  return 2;
}

// "--name=" (an empty value after '=') as "--name" "": CLI11 2.1.2 takes the next argument as the value of a
// "--name=" instead (`wick encode-prompt --prompt= --prompt "a cat"` would encode "--prompt" and drop a prompt).
std::vector<std::string> split_empty_values(int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = 0; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i > 0 && arg.size() > 3 && arg.rfind("--", 0) == 0 && arg.back() == '=' &&
        arg.find('=') == arg.size() - 1) {
      args.push_back(arg.substr(0, arg.size() - 1));
      args.emplace_back();
    } else {
      args.push_back(arg);
    }
  }
  return args;
}

}  // namespace

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
  wick::launch::add_presets_command(app);
  app.set_version_flag("--version", std::string("wick ") + WICK_VERSION + " (commit " + WICK_GIT_COMMIT + ")");
  if (argc > 1 && argv[1][0] != '-') {
    const std::string word = argv[1];
    const auto commands = app.get_subcommands({});
    if (std::none_of(commands.begin(), commands.end(), [&](const CLI::App* c) { return c->check_name(word); }))
      return refuse_unknown_command(app, word);
  }
  std::vector<std::string> args = split_empty_values(argc, argv);
  std::vector<char*> arg_pointers;
  for (std::string& arg : args) arg_pointers.push_back(arg.data());
  try {
    app.parse(static_cast<int>(arg_pointers.size()), arg_pointers.data());
  } catch (const CLI::ParseError& error) {
    int status = app.exit(error);
    return status == 0 ? 0 : 2;
  } catch (const wick::WickError& error) {
    std::fprintf(stderr, "wick: error: %s\n", wick::printable_utf8(error.what()).c_str());
    return wick::launch::exit_status_for(error.kind());
  } catch (const std::exception& error) {
    std::fprintf(stderr, "wick: error: %s\n", wick::printable_utf8(error.what()).c_str());
    return 4;
  }
  return wick::launch::exit_status();
}
