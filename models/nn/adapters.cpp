#include "models/nn/adapters.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace wick::nn {
namespace {

std::string joined(const std::vector<std::string>& items, const char* separator) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : separator) + item;
  return out;
}

// The registered types that wrap modules of `module_kind` ("lora").
std::string types_wrapping(const std::string& module_kind) {
  std::vector<std::string> names;
  for (const AdapterType& type : adapter_types())
    for (const AdapterKind& k : type.kinds)
      if (k.module_kind == module_kind) names.push_back(type.name);
  return joined(names, ", ");
}

// What one pattern matched among the adaptable layers: counts by kind, with a first example.
struct PatternMatches {
  bool wrapped_any = false;
  std::map<std::string, std::pair<int, std::string>> unsupported;  // kind -> (count, first path)
};

}  // namespace

AdapterReport apply_adapters(Module& model, const AdapterConfig& config) {
  const AdapterType& type = adapter_type(config.type);
  WICK_CHECK_KIND(Config, !config.patterns.empty(), "network.target: no patterns given");
  // First the plan, checked, then the wrapping: an error leaves the model as it was.
  std::vector<std::string> candidate_paths;  // the layers this type could wrap
  std::vector<PatternMatches> matches(config.patterns.size());
  std::vector<std::tuple<std::string, std::shared_ptr<Module>, const AdapterKind*>> plan;
  for (auto& [path, module] : model.named_modules()) {
    if (path.empty()) continue;
    // A layer inside an adapter (lora_down/lora_up) is never wrapped again.
    if (path.find("lora_down") != std::string::npos || path.find("lora_up") != std::string::npos) continue;
    const std::string kind_name = adaptable_kind(*module);
    if (kind_name.empty() || (config.accepts && !config.accepts(*module))) continue;
    const AdapterKind* kind = type.kind_for(*module);
    if (kind) candidate_paths.push_back(path);
    bool match = false;
    for (size_t i = 0; i < config.patterns.size(); ++i) {
      if (!glob_match(config.patterns[i], path)) continue;
      match = true;
      if (kind) {
        matches[i].wrapped_any = true;
      } else {
        auto& [count, example] = matches[i].unsupported[kind_name];
        if (count++ == 0) example = path;
      }
    }
    if (match && kind) plan.emplace_back(path, module, kind);
  }
  for (size_t i = 0; i < config.patterns.size(); ++i) {
    const PatternMatches& m = matches[i];
    if (m.wrapped_any || m.unsupported.empty()) continue;
    std::vector<std::string> found, hints;
    for (const auto& [kind_name, seen] : m.unsupported) {
      found.push_back(std::to_string(seen.first) + " " + kind_name + " (e.g. " + seen.second + ")");
      hints.push_back(kind_name + ": " + types_wrapping(kind_name));
    }
    WICK_FAIL(Config, "network.target pattern '", config.patterns[i], "' matches only ", joined(found, ", "),
              ", which network.type '", type.name, "' does not wrap (", type.name, " wraps ", type.kind_names(),
              "; types that wrap ", joined(hints, "; "), ")");
  }
  if (plan.empty()) {
    std::vector<std::string> examples(candidate_paths.begin(),
                                      candidate_paths.begin() + std::min<ptrdiff_t>(6, std::ssize(candidate_paths)));
    std::vector<std::string> kinds;
    for (const AdapterKind& k : type.kinds) kinds.push_back(k.module_kind);
    WICK_FAIL(Config, "network.target patterns [", joined(config.patterns, ", "), "] matched no ", joined(kinds, " or "),
              " layer (the model has ", candidate_paths.size(), " ", joined(kinds, "/"), " layers, e.g. ",
              examples.empty() ? "none" : joined(examples, ", "), ")");
  }
  // The base is frozen; adapters added by an earlier call (LoCon's second pass) keep training.
  std::vector<std::string> earlier;
  for (const auto& [path, adapter] : find_adapters(model))
    for (const auto& [name, tensor] : adapter->trainable_parameters()) earlier.push_back(path + "." + name);
  model.set_all_trainable(false);
  if (!earlier.empty()) model.set_trainable(earlier, true);
  AdapterReport report;
  for (const auto& [path, module, kind] : plan) {
    replace_module(model, path, kind->wrap(module, config.options));
    report.wrapped.push_back(path);
  }
  report.n_trainable = model.n_parameters(/*trainable_only=*/true);
  return report;
}

std::vector<std::pair<std::string, std::shared_ptr<Adapter>>> find_adapters(const Module& model) {
  std::vector<std::pair<std::string, std::shared_ptr<Adapter>>> out;
  for (auto& [path, module] : model.named_modules())
    if (auto adapter = std::dynamic_pointer_cast<Adapter>(module)) out.emplace_back(path, adapter);
  return out;
}

}  // namespace wick::nn
