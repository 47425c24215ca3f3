#include "models/nn/adapters.h"

#include <algorithm>

namespace wick::nn {

AdapterReport apply_adapters(Module& model, const AdapterConfig& config) {
  WICK_CHECK_KIND(Config, config.type == "lora" || config.type == "dora", "network.type '", config.type,
                  "' is not an adapter type (valid: lora, dora; full trains the base itself)");
  WICK_CHECK_KIND(Config, !config.patterns.empty(), "network.target: no patterns given");
  model.set_all_trainable(false);
  std::vector<std::string> linear_paths;
  AdapterReport report;
  for (auto& [path, module] : model.named_modules()) {
    auto linear = std::dynamic_pointer_cast<Linear>(module);
    if (!linear || path.empty()) continue;
    linear_paths.push_back(path);
    bool match = std::any_of(config.patterns.begin(), config.patterns.end(),
                             [&](const std::string& pattern) { return glob_match(pattern, path); });
    if (!match) continue;
    // A Linear inside an adapter (lora_down/lora_up) is never wrapped again.
    if (path.find("lora_down") != std::string::npos || path.find("lora_up") != std::string::npos) continue;
    std::shared_ptr<Module> wrapper;
    if (config.type == "lora")
      wrapper = std::make_shared<LoRALinear>(linear, config.options);
    else
      wrapper = std::make_shared<DoRALinear>(linear, config.options);
    replace_module(model, path, wrapper);
    report.wrapped.push_back(path);
  }
  if (report.wrapped.empty()) {
    std::string examples;
    for (size_t i = 0; i < std::min<size_t>(6, linear_paths.size()); ++i) examples += (i ? ", " : "") + linear_paths[i];
    std::string patterns;
    for (const auto& p : config.patterns) patterns += (patterns.empty() ? "" : ", ") + p;
    WICK_FAIL(Config, "network.target patterns [", patterns, "] matched no Linear layer (the model has ",
              linear_paths.size(), " Linear layers, e.g. ", examples.empty() ? "none" : examples, ")");
  }
  report.n_trainable = model.n_parameters(/*trainable_only=*/true);
  return report;
}

std::vector<std::pair<std::string, std::shared_ptr<LoRALinear>>> find_adapters(const Module& model) {
  std::vector<std::pair<std::string, std::shared_ptr<LoRALinear>>> out;
  for (auto& [path, module] : model.named_modules())
    if (auto adapter = std::dynamic_pointer_cast<LoRALinear>(module)) out.emplace_back(path, adapter);
  return out;
}

}  // namespace wick::nn
