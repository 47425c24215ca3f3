#include "models/weights/float8_weights.h"

#include <map>
#include <set>

#include "engine/autograd/node.h"
#include "models/nn/linear.h"
#include "runtime/error.h"

namespace wick {
namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string strip_suffix(const std::string& text, const std::string& suffix) {
  return text.substr(0, text.size() - suffix.size());
}

// Target name -> the rule that makes it (a rename of itself when no rule names it).
std::map<std::string, KeyRule> rules_by_target(const WeightSource& source, const DetectedFormat& format) {
  std::map<std::string, KeyRule> out;
  for (const KeyRule& rule : expand_rules(source, format)) {
    bool any_present = false;
    for (const std::string& s : rule.sources) any_present = any_present || source.contains(format.prefix + s);
    if (any_present) out.emplace(rule.target, rule);
  }
  return out;
}

// Companion tensors of a float8 layer that carry nothing wick uses.
const char* const kUnusedCompanions[] = {".scale_input", ".input_scale", ".comfy_quant"};

}  // namespace

Float8Source prepare_float8_layers(Module& model, const WeightSource& source, const DetectedFormat& format) {
  Float8Source out{.format = format, .prefilled = {}, .layers = {}};
  const std::string& prefix = format.prefix;
  bool any_float8 = false;
  for (const std::string& name : source.names())
    any_float8 = any_float8 || (name.rfind(prefix, 0) == 0 && source.info(name).dtype == "F8_E4M3");
  if (!any_float8) return out;

  const std::map<std::string, KeyRule> rules = rules_by_target(source, format);
  std::set<std::string> used_scales;  // source names (without the prefix) a float8 Linear takes
  for (const auto& [path, module] : model.named_modules()) {
    auto* linear = dynamic_cast<nn::Linear*>(module.get());
    if (!linear || linear->is_float8()) continue;
    const std::string target = path + ".weight";
    auto rule = rules.find(target);
    std::vector<std::string> sources = rule == rules.end() ? std::vector<std::string>{target} : rule->second.sources;
    bool float8 = false;
    for (const std::string& s : sources)
      float8 = float8 || (source.contains(prefix + s) && source.info(prefix + s).dtype == "F8_E4M3");
    if (!float8) continue;
    const bool renamed = sources.size() == 1 && (rule == rules.end() || rule->second.kind == KeyRuleKind::Rename ||
                                                 rule->second.kind == KeyRuleKind::FirstOf);
    WICK_CHECK_KIND(Data, renamed, "weights: ", source.path(), ": the float8 weight of ", path,
                    " is made from several F8_E4M3 tensors (", sources.size(),
                    "); wick reads float8 files only in the model's own naming (for Flux: Black Forest Labs' "
                    "names, as flux1-dev-fp8 and ComfyUI's files have)");
    const std::string module_source = strip_suffix(sources[0], ".weight");
    std::string scale_source;
    for (const char* suffix : {".weight_scale", ".scale_weight"})
      if (scale_source.empty() && source.contains(prefix + module_source + suffix))
        scale_source = module_source + suffix;
    Shape scale_shape{1};
    if (!scale_source.empty()) {
      const SafetensorsInfo& info = source.info(prefix + scale_source);
      WICK_CHECK_KIND(Data, info.dtype == "F32" || info.dtype == "BF16" || info.dtype == "F16", "weights: ",
                      source.path(), ": the float8 scale ", prefix + scale_source, " is ", info.dtype,
                      ", not a float");
      WICK_CHECK_KIND(Data, numel(info.shape) == 1 || numel(info.shape) == linear->out_features(), "weights: ",
                      source.path(), ": the float8 scale ", prefix + scale_source, " ", shape_string(info.shape),
                      " holds neither one value nor one per row of ", path, " (", linear->out_features(), " rows)");
      scale_shape = info.shape;
      used_scales.insert(scale_source);
      if (scale_source != path + ".weight_scale")
        out.format.format.rules.push_back(rename(path + ".weight_scale", scale_source));
    } else {
      out.prefilled.push_back(path + ".weight_scale");
    }
    for (const char* suffix : kUnusedCompanions)
      if (source.contains(prefix + module_source + suffix)) out.format.format.ignored.push_back(module_source + suffix);
    linear->set_all_trainable(false);  // a frozen base: load_mapped freezes the rest
    linear->expect_float8(scale_shape, linear->weight_.device());
    out.layers.push_back(path);
  }
  if (source.contains(prefix + "scaled_fp8")) out.format.format.ignored.push_back("scaled_fp8");
  // A scale that no float8 Linear took would be silently dropped (or loaded as a parameter it is not); the
  // format's ignored names (layers a partial model does not build) are not read at all.
  const std::set<std::string> ignored(format.format.ignored.begin(), format.format.ignored.end());
  for (const std::string& name : source.names()) {
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string local = name.substr(prefix.size());
    if (ignored.count(local)) continue;
    if ((ends_with(local, ".scale_weight") || ends_with(local, ".weight_scale")) && !used_scales.count(local))
      WICK_FAIL(Data, "weights: ", source.path(), ": the float8 scale ", name,
                " belongs to no Linear of the model whose weight is F8_E4M3 (wick reads float8 files in the "
                "model's own naming)");
  }
  return out;
}

Float8Report quantize_linears(Module& model, const std::vector<std::string>& patterns, Float8Scaling scaling) {
  Float8Report report;
  for (const auto& [path, module] : model.named_modules()) {
    auto* linear = dynamic_cast<nn::Linear*>(module.get());
    if (!linear) continue;
    bool matched = false;
    for (const std::string& pattern : patterns) matched = matched || glob_match(pattern, path);
    if (!matched) continue;
    if (linear->is_float8()) {
      ++report.n_already;
      continue;
    }
    if (autograd::requires_grad(linear->weight_) || !is_floating(linear->weight_.dtype())) continue;
    report.bytes_before += static_cast<int64_t>(linear->weight_.nbytes());
    linear->quantize_float8(scaling);
    report.bytes_after += float8_bytes(linear->weight_, linear->weight_scale_);
    report.quantized.push_back(path);
  }
  return report;
}

bool is_float8_companion(const std::string& name) {
  if (name == "scaled_fp8" || ends_with(name, ".scaled_fp8")) return true;
  for (const char* suffix : {".weight_scale", ".scale_weight"})
    if (ends_with(name, suffix)) return true;
  for (const char* suffix : kUnusedCompanions)
    if (ends_with(name, suffix)) return true;
  return false;
}

int64_t count_float8_layers(const Module& model) {
  // By parameter name: adapters that wrap a float8 Linear keep its parameters under the same names.
  int64_t n = 0;
  for (const auto& [name, tensor] : model.named_parameters())
    if (ends_with(name, ".weight_scale")) ++n;
  return n;
}

bool has_float8_layers(const Module& model) { return count_float8_layers(model) > 0; }

}  // namespace wick
