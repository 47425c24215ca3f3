#include "launch/prompt_args.h"

#include <algorithm>
#include <functional>
#include <iterator>
#include <sstream>
#include <type_traits>
#include <variant>

#include "models/registry.h"

namespace wick::launch {
namespace {

std::string value_text(const OptionValue& value) {
  std::ostringstream out;
  std::visit(
      [&](const auto& v) {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, bool>) {
          out << (v ? "true" : "false");
        } else if constexpr (std::is_same_v<V, int64_t> || std::is_same_v<V, double> ||
                             std::is_same_v<V, std::string>) {
          out << v;
        } else {
          for (size_t i = 0; i < v.size(); ++i) out << (i ? "," : "") << v[i];
        }
      },
      value);
  return out.str();
}

// "name" -> "help (flux 512, sd3 256)": the first declaration's help, then each architecture with its default.
template <typename Item, typename Describe>
std::vector<std::pair<Item, std::string>> gather(
    const std::function<const std::vector<Item>&(const DatasetSpec&)>& items_of, Describe describe) {
  std::vector<std::pair<Item, std::string>> out;
  for (const Architecture* arch : encodable_architectures()) {
    const DatasetSpec spec = *arch->dataset_spec();
    for (const Item& item : items_of(spec)) {
      auto found =
          std::find_if(out.begin(), out.end(), [&](const auto& entry) { return entry.first.name == item.name; });
      if (found == out.end()) {
        out.emplace_back(item, "");
        found = std::prev(out.end());
      }
      found->second += (found->second.empty() ? "" : ", ") + arch->name() + describe(item);
    }
  }
  return out;
}

}  // namespace

void add_prompt_args(CLI::App& cmd, PromptArgs& args) {
  CLI::Option* path = cmd.add_option("--path", args.pipeline,
                                     "diffusers pipeline folder (vae/, text_encoder*/, tokenizer*/)");
  const auto parts = gather<text::PromptPart>([](const DatasetSpec& s) -> const auto& { return s.prompts.parts; },
                                              [](const text::PromptPart&) { return std::string(); });
  for (const auto& [part, archs] : parts) {
    CLI::Option* file = cmd.add_option(text::option_flag(part.name), args.files[part.name],
                                       part.help + " (" + archs + ")");
    path->excludes(file);
  }
  const auto options = gather<OptionKey>([](const DatasetSpec& s) -> const auto& { return s.prompts.options; },
                                         [](const OptionKey& key) {
                                           return key.type == OptionType::Bool ? std::string()
                                                                               : " " + value_text(key.default_value);
                                         });
  for (const auto& [key, archs] : options) {
    std::string help = key.help + " (" + archs + ")";
    if (!key.choices.empty()) {
      help += ": ";
      for (size_t i = 0; i < key.choices.size(); ++i) help += (i ? " | " : "") + key.choices[i];
    }
    CLI::Option* option = key.type == OptionType::Bool
                              ? cmd.add_flag(text::option_flag(key.name), args.flags[key.name], help)
                              : cmd.add_option(text::option_flag(key.name), args.values[key.name], help);
    args.options.emplace_back(key.name, option);
  }
}

text::PromptEncoderRequest prompt_request(const PromptArgs& args, const Architecture& arch) {
  const DatasetSpec spec = *arch.dataset_spec();
  text::PromptEncoderRequest request{.pipeline = args.pipeline};
  for (const auto& [name, path] : args.files)
    if (!path.empty()) request.files[name] = path;
  std::map<std::string, std::string> given;
  for (const auto& [name, option] : args.options) {
    if (option->count() == 0) continue;
    const auto flag = args.flags.find(name);
    given[name] = flag != args.flags.end() ? (flag->second ? "true" : "false") : args.values.at(name);
  }
  text::check_prompt_files(spec.prompts, request, arch.name());
  request.options = text::prompt_options(spec.prompts, given, arch.name());
  return request;
}

}  // namespace wick::launch
