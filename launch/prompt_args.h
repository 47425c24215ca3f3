// The text-encoder options `wick encode-prompt` and `wick dataset encode` share, read from the registry: --path (a
// diffusers pipeline folder), one option per file part and per prompt option of every architecture with a
// DatasetSpec (models/architecture.h; "clip_l" -> --clip-l, "t5_length" -> --t5-length), and the request for the
// model chosen. A new architecture's parts and options appear here without an edit.
//
//   auto args = std::make_shared<PromptArgs>();
//   add_prompt_args(*cmd, *args);                                   // before parsing
//   text::PromptEncoderRequest r = prompt_request(*args, arch);     // after: parts checked, options parsed
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "models/architecture.h"
#include "models/text/prompt_encoder.h"

namespace wick::launch {

struct PromptArgs {
  std::string pipeline;                       // --path
  std::map<std::string, std::string> files;   // part name -> path ("" = not given)
  std::map<std::string, std::string> values;  // option name -> its text (flags: "true" / "false")
  std::map<std::string, bool> flags;          // boolean option name -> given
  std::vector<std::pair<std::string, CLI::Option*>> options;  // option name -> its CLI11 option
};

// Registers --path, the union of the encodable architectures' file parts (--path excludes each) and prompt options
// (booleans as flags), each help line naming the architectures that take it and their defaults.
void add_prompt_args(CLI::App& cmd, PromptArgs& args);

// The parsed arguments as `arch`'s request (loading and batch size left to the caller): the files it does not take
// and the options it does not have are Config errors naming them (text::check_prompt_files, text::prompt_options).
text::PromptEncoderRequest prompt_request(const PromptArgs& args, const Architecture& arch);

}  // namespace wick::launch
