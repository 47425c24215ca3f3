#include "models/text/prompt_encoder.h"

#include <algorithm>

#include "runtime/error.h"

namespace wick::text {
namespace {

template <typename Item>
std::string flags_of(const std::vector<Item>& items) {
  std::string out;
  for (const Item& item : items) out += (out.empty() ? "" : ", ") + option_flag(item.name);
  return out.empty() ? std::string("none") : out;
}

}  // namespace

std::string option_flag(const std::string& name) {
  std::string flag = "--" + name;
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

ModelOptions prompt_options(const PromptSpec& spec, const std::map<std::string, std::string>& given,
                            const std::string& model) {
  ModelOptions options = ModelOptions::defaults(spec.options);
  for (const auto& [name, text] : given) {
    const auto key = std::find_if(spec.options.begin(), spec.options.end(),
                                  [&](const OptionKey& k) { return k.name == name; });
    WICK_CHECK_KIND(Config, key != spec.options.end(), model, " takes no ", option_flag(name), " (its prompt options: ",
                    flags_of(spec.options), ")");
    options.set(name, parse_option_text(*key, text, option_flag(name)));
  }
  return options;
}

void check_prompt_files(const PromptSpec& spec, const PromptEncoderRequest& request, const std::string& model) {
  bool any_file = false;
  for (const auto& [name, path] : request.files) {
    if (path.empty()) continue;
    any_file = true;
    const bool known = std::any_of(spec.parts.begin(), spec.parts.end(),
                                   [&](const PromptPart& part) { return part.name == name; });
    WICK_CHECK_KIND(Config, known, model, "'s text encoders take no ", option_flag(name), " (they take ",
                    flags_of(spec.parts), ")");
    WICK_CHECK_KIND(Config, request.pipeline.empty(), "a pipeline folder (--path) excludes ", option_flag(name));
  }
  WICK_CHECK_KIND(Config, any_file || !request.pipeline.empty(), model, " text encoders: give a diffusers pipeline "
                  "folder (--path) or the encoder files (", flags_of(spec.parts), ")");
}

const std::string& prompt_file(const PromptEncoderRequest& request, const std::string& part) {
  static const std::string none;
  const auto found = request.files.find(part);
  return found == request.files.end() ? none : found->second;
}

ModelOptions resolved_options(const PromptSpec& spec, const PromptEncoderRequest& request) {
  return request.options.values().empty() ? ModelOptions::defaults(spec.options) : request.options;
}

}  // namespace wick::text
