#include "engine/module.h"

#include <algorithm>
#include <set>

#include "engine/autograd/node.h"
#include "runtime/safetensors.h"

namespace wick {
namespace {

// Edit distance, for "did you mean" hints.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string nearest_names(const std::string& name, const std::vector<std::string>& candidates) {
  std::vector<std::pair<size_t, std::string>> scored;
  for (const auto& candidate : candidates) scored.emplace_back(edit_distance(name, candidate), candidate);
  std::sort(scored.begin(), scored.end());
  std::string out;
  for (size_t i = 0; i < std::min<size_t>(3, scored.size()); ++i) out += (i ? ", " : "") + scored[i].second;
  return out;
}

std::string join_name(const std::string& prefix, const std::string& name) {
  if (prefix.empty()) return name;
  if (name.empty()) return prefix;
  return prefix + "." + name;
}

}  // namespace

bool glob_match(const std::string& pattern, const std::string& name) {
  size_t p = 0, n = 0, star = std::string::npos, resume = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p;
      ++n;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = n;
    } else if (star != std::string::npos) {
      p = star + 1;
      n = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

Tensor Module::forward(const Tensor&) {
  WICK_FAIL(Usage, type_name(), " has no single-input forward; call it with its own arguments");
}

Tensor& Module::register_parameter(const std::string& name, Tensor* slot, Tensor initial, bool trainable) {
  WICK_CHECK(name.find('.') == std::string::npos && !name.empty(), type_name(), ": bad parameter name '", name,
             "' (no dots; children give the hierarchy)");
  for (const auto& [existing, _] : parameters_)
    WICK_CHECK(existing != name, type_name(), ": parameter '", name, "' registered twice");
  *slot = std::move(initial);
  if (trainable && slot->defined()) autograd::set_requires_grad(*slot, true, name);
  parameters_.emplace_back(name, slot);
  return *slot;
}

Tensor& Module::register_parameter_slot(const std::string& name, Tensor* slot) {
  WICK_CHECK(name.find('.') == std::string::npos && !name.empty(), type_name(), ": bad parameter name '", name, "'");
  for (const auto& [existing, _] : parameters_)
    WICK_CHECK(existing != name, type_name(), ": parameter '", name, "' registered twice");
  parameters_.emplace_back(name, slot);
  return *slot;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  WICK_CHECK(module != nullptr, type_name(), ": child '", name, "' is null");
  WICK_CHECK(name.find('.') == std::string::npos && !name.empty(), type_name(), ": bad child name '", name, "'");
  for (const auto& [existing, _] : children_)
    WICK_CHECK(existing != name, type_name(), ": child '", name, "' registered twice");
  children_.emplace_back(name, std::move(module));
}

void Module::replace_child(const std::string& name, std::shared_ptr<Module> module) {
  for (auto& [existing, child] : children_)
    if (existing == name) {
      child = std::move(module);
      return;
    }
  WICK_FAIL(Usage, type_name(), ": no child named '", name, "' to replace");
}

std::shared_ptr<Module> Module::child(const std::string& name) const {
  for (const auto& [existing, module] : children_)
    if (existing == name) return module;
  return nullptr;
}

void Module::collect_parameters(const std::string& prefix, std::vector<std::pair<std::string, Tensor*>>& out) const {
  for (const auto& [name, slot] : parameters_) out.emplace_back(join_name(prefix, name), slot);
  for (const auto& [name, module] : children_) module->collect_parameters(join_name(prefix, name), out);
}

std::vector<std::pair<std::string, Tensor*>> parameter_slots(const Module& module) {
  std::vector<std::pair<std::string, Tensor*>> out;
  module.collect_parameters("", out);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [name, slot] : parameter_slots(*this))
    if (slot->defined()) out.emplace_back(name, *slot);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::trainable_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& entry : named_parameters())
    if (autograd::requires_grad(entry.second)) out.push_back(std::move(entry));
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_modules() const {
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
  auto self = std::const_pointer_cast<Module>(shared_from_this());
  out.emplace_back("", self);
  for (const auto& [name, module] : children_)
    for (auto& [sub_name, sub] : module->named_modules()) out.emplace_back(join_name(name, sub_name), sub);
  return out;
}

Tensor& Module::parameter(const std::string& dotted_name) {
  std::vector<std::string> names;
  for (auto& [name, slot] : parameter_slots(*this)) {
    if (name == dotted_name) return *slot;
    names.push_back(name);
  }
  WICK_FAIL(Usage, type_name(), ": no parameter '", dotted_name, "' (nearest: ", nearest_names(dotted_name, names),
            ")");
}

int64_t Module::n_parameters(bool trainable_only) const {
  int64_t total = 0;
  for (const auto& [name, tensor] : named_parameters())
    if (!trainable_only || autograd::requires_grad(tensor)) total += tensor.numel();
  return total;
}

int Module::set_trainable(const std::vector<std::string>& patterns, bool trainable) {
  int n_matched = 0;
  for (auto& [name, slot] : parameter_slots(*this)) {
    if (!slot->defined()) continue;
    bool match = std::any_of(patterns.begin(), patterns.end(),
                             [&](const std::string& pattern) { return glob_match(pattern, name); });
    if (!match) continue;
    autograd::set_requires_grad(*slot, trainable, name);
    ++n_matched;
  }
  return n_matched;
}

void Module::set_all_trainable(bool trainable) { set_trainable({"*"}, trainable); }

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, module] : children_) module->train(on);
}

void Module::to(Device device) {
  for (auto& [name, slot] : parameter_slots(*this)) {
    if (!slot->defined() || slot->device() == device) continue;
    bool trainable = autograd::requires_grad(*slot);
    *slot = autograd::detach(*slot).to(device);
    if (trainable) autograd::set_requires_grad(*slot, true, name);
  }
}

void Module::to(DType dtype) {
  for (auto& [name, slot] : parameter_slots(*this)) {
    if (!slot->defined() || !is_floating(slot->dtype()) || slot->dtype() == dtype) continue;
    bool trainable = autograd::requires_grad(*slot);
    *slot = autograd::detach(*slot).to(dtype);
    if (trainable) autograd::set_requires_grad(*slot, true, name);
  }
}

void replace_module(Module& root, const std::string& dotted_name, std::shared_ptr<Module> module) {
  size_t dot = dotted_name.rfind('.');
  if (dot == std::string::npos) {
    root.replace_child(dotted_name, std::move(module));
    return;
  }
  Module* parent = &root;
  size_t start = 0;
  while (start < dot) {
    size_t next = dotted_name.find('.', start);
    std::string part = dotted_name.substr(start, next - start);
    auto child = parent->child(part);
    WICK_CHECK(child != nullptr, "replace_module: no module '", dotted_name.substr(0, next), "'");
    parent = child.get();
    start = next + 1;
  }
  parent->replace_child(dotted_name.substr(dot + 1), std::move(module));
}

LoadReport load_parameters(Module& module, const SafetensorsFile& file, bool strict, bool trainable,
                           const std::string& prefix) {
  LoadReport report;
  std::set<std::string> used;
  for (auto& [name, slot] : parameter_slots(module)) {
    std::string key = prefix + name;
    if (!file.contains(key)) {
      report.missing.push_back(name);
      continue;
    }
    Tensor loaded = file.get(key);
    WICK_CHECK_KIND(Data, !slot->defined() || loaded.shape() == slot->shape(), file.path(), ": tensor '", key,
                    "' has shape ", loaded.shape(), " but parameter '", name, "' expects ", slot->shape());
    if (slot->defined() && loaded.dtype() != slot->dtype()) loaded = loaded.to(slot->dtype());
    if (slot->defined() && slot->device() != loaded.device()) loaded = loaded.to(slot->device());
    *slot = loaded;
    if (trainable) autograd::set_requires_grad(*slot, true, name);
    used.insert(key);
    report.loaded.push_back(name);
  }
  for (const std::string& key : file.names())
    if (!used.count(key) && key.rfind(prefix, 0) == 0) report.unexpected.push_back(key);
  if (strict) {
    std::vector<std::string> file_names(file.names().begin(), file.names().end());
    WICK_CHECK_KIND(Data, report.missing.empty(), file.path(), ": ", report.missing.size(),
                    " parameters missing, first '", report.missing.empty() ? "" : report.missing[0], "' (nearest in file: ",
                    report.missing.empty() ? "" : nearest_names(prefix + report.missing[0], file_names), ")");
    WICK_CHECK_KIND(Data, report.unexpected.empty(), file.path(), ": ", report.unexpected.size(),
                    " tensors match no parameter, first '", report.unexpected.empty() ? "" : report.unexpected[0], "'");
  }
  return report;
}

void save_parameters(const Module& module, const std::string& path, bool trainable_only,
                     const std::map<std::string, std::string>& metadata) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (auto& [name, tensor] : module.named_parameters())
    if (!trainable_only || autograd::requires_grad(tensor)) tensors.emplace_back(name, autograd::detach(tensor));
  save_safetensors(path, tensors, metadata);
}

}  // namespace wick
