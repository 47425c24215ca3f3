#include "models/llm/llm_weights.h"

#include <string>

namespace wick::llm {
namespace {

// The layer index of "layers.N.<rest>", or -1.
int64_t layer_index(const std::string& name) {
  const std::string prefix = "layers.";
  if (name.rfind(prefix, 0) != 0) return -1;
  size_t end = prefix.size();
  while (end < name.size() && name[end] >= '0' && name[end] <= '9') ++end;
  if (end == prefix.size() || end >= name.size() || name[end] != '.' || end - prefix.size() > 9) return -1;
  return std::stoll(name.substr(prefix.size(), end - prefix.size()));
}

}  // namespace

const WeightFormat& weight_format() {
  static const WeightFormat format{.name = "transformers",
                                   .detect_keys = {"layers.0.input_layernorm.weight"},
                                   .prefixes = {"model.language_model.", "language_model.model.", "model.", ""},
                                   .rules = {},
                                   .blocks = {},
                                   .ignored = {"lm_head.weight"}};
  return format;
}

DetectedFormat detect_weight_format(const WeightSource& source) { return detect_format(source, {weight_format()}); }

DetectedFormat skipping_layers(const WeightSource& source, const DetectedFormat& format, int64_t n_layers,
                               bool final_norm) {
  DetectedFormat out = format;
  for (const std::string& name : source.names()) {
    if (name.rfind(format.prefix, 0) != 0) continue;
    const std::string local = name.substr(format.prefix.size());
    if (layer_index(local) >= n_layers || (!final_norm && local == "norm.weight")) out.format.ignored.push_back(local);
  }
  return out;
}

}  // namespace wick::llm
