#include "models/zimage/zimage_weights.h"

#include <set>

#include "models/nn/linear.h"
#include "models/weights/float8_weights.h"
#include "runtime/error.h"
#include "runtime/ops/creation.h"

namespace wick::zimage {
namespace {

const char* const kBlockLists[] = {"layers.", "noise_refiner.", "context_refiner."};
const char* const kQkv[] = {"to_q", "to_k", "to_v"};
const char* const kF8 = "F8_E4M3";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// ComfyUI's per-block names; with_qkv_split false leaves the fused qkv to the float8 path.
BlockRules comfy_block_rules(const std::string& list, bool with_qkv_split) {
  const std::string b = list + "{N}.attention.";
  BlockRules rules{.count_prefix = list, .rules = {}};
  if (with_qkv_split)
    for (int part = 0; part < 3; ++part)
      rules.rules.push_back(split_rows(b + kQkv[part] + ".weight", b + "qkv.weight", part, 3));
  rules.rules.push_back(rename(b + "to_out.0.weight", b + "out.weight"));
  rules.rules.push_back(rename(b + "norm_q.weight", b + "q_norm.weight"));
  rules.rules.push_back(rename(b + "norm_k.weight", b + "k_norm.weight"));
  return rules;
}

WeightFormat make_comfyui_format(bool with_qkv_split) {
  WeightFormat format{.name = "comfyui",
                      .detect_keys = {"x_embedder.weight", "layers.0.attention.qkv.weight"},
                      .prefixes = {"", "model.diffusion_model.", "diffusion_model."},
                      .rules = {rename_layer("all_x_embedder.2-1", "x_embedder"),
                                rename_layer("all_final_layer.2-1.linear", "final_layer.linear"),
                                rename_layer("all_final_layer.2-1.adaLN_modulation.1",
                                             "final_layer.adaLN_modulation.1")},
                      .blocks = {},
                      .ignored = {"norm_final.weight"}};
  for (const char* list : kBlockLists) format.blocks.push_back(comfy_block_rules(list, with_qkv_split));
  return format;
}

bool is_float8(const WeightSource& source, const std::string& name) {
  return source.contains(name) && source.info(name).dtype == kF8;
}

// The scale tensor beside a float8 weight (source names with the prefix): "<module>.weight_scale" or
// "<module>.scale_weight"; empty when the file has none (scale 1).
std::string scale_of(const WeightSource& source, const std::string& module) {
  for (const char* suffix : {".weight_scale", ".scale_weight"})
    if (source.contains(module + suffix)) return module + suffix;
  return "";
}

// The scale as f32 [1] or [rows]; checks it is one value or one per row of `rows`.
Tensor read_scale(const WeightSource& source, const std::string& name, int64_t rows) {
  const SafetensorsInfo& info = source.info(name);
  WICK_CHECK_KIND(Data, info.dtype == "F32" || info.dtype == "BF16" || info.dtype == "F16", "weights: ",
                  source.path(), ": the float8 scale ", name, " is ", info.dtype, ", not a float");
  const int64_t n = numel(info.shape);
  WICK_CHECK_KIND(Data, n == 1 || n == rows, "weights: ", source.path(), ": the float8 scale ", name, " ",
                  shape_string(info.shape), " holds neither one value nor one per row (", rows, " rows)");
  return source.get(name).reshape({n}).to(DType::F32);
}

// Float8 Linears of the model, prepared before load_mapped: their slots turned into codes + scales,
// the rules that load them, the names load_mapped must not look for or complain about.
struct Float8Plan {
  DetectedFormat format;
  std::vector<std::string> prefilled;
  std::vector<std::string> layers;
};

Float8Plan prepare_float8(ZImageTransformer& model, const WeightSource& source, const DetectedFormat& detected) {
  Float8Plan plan{detected, {}, {}};
  const std::string& prefix = detected.prefix;
  bool any = false;
  for (const std::string& name : source.names()) any = any || (name.rfind(prefix, 0) == 0 && is_float8(source, name));
  if (!any) return plan;
  const bool comfy = detected.format.name == "comfyui";
  bool fused_float8 = false, fused_plain = false;
  for (const std::string& block : model.block_paths()) {
    const std::string qkv = prefix + block + ".attention.qkv.weight";
    if (!comfy || !source.contains(qkv)) continue;
    (is_float8(source, qkv) ? fused_float8 : fused_plain) = true;
  }
  WICK_CHECK_KIND(Data, !(fused_float8 && fused_plain), "weights: ", source.path(),
                  ": some blocks' attention.qkv are F8_E4M3 and some are not; wick reads float8 files whose fused qkv "
                  "weights are all float8 or all floating");
  if (fused_float8) plan.format.format = make_comfyui_format(/*with_qkv_split=*/false);

  std::set<std::string> used_scales;  // source names, with the prefix
  auto make_float8 = [&](const std::string& path, nn::Linear& linear, const Shape& scale_shape) {
    linear.set_all_trainable(false);
    linear.expect_float8(scale_shape, linear.weight_.device());
    plan.layers.push_back(path);
  };
  const std::map<std::string, KeyRule> renames = [&] {
    std::map<std::string, KeyRule> out;
    for (const KeyRule& rule : expand_rules(source, plan.format)) out.emplace(rule.target, rule);
    return out;
  }();
  for (const auto& [path, module] : model.named_modules()) {
    auto* linear = dynamic_cast<nn::Linear*>(module.get());
    if (!linear || linear->is_float8()) continue;
    // A fused ComfyUI qkv: rows [part·dim, (part+1)·dim) of the codes, zero-copy, and their scale.
    const size_t at = path.rfind(".attention.to_");
    if (fused_float8 && at != std::string::npos && path.size() == at + 15 && path.back() != 't') {
      const std::string qkv_module = prefix + path.substr(0, at) + ".attention.qkv";
      const int64_t part = path.back() == 'q' ? 0 : path.back() == 'k' ? 1 : 2;
      const SafetensorsInfo& info = source.info(qkv_module + ".weight");
      WICK_CHECK_KIND(Data, info.shape.size() == 2 && info.shape[0] == 3 * linear->out_features() &&
                                info.shape[1] == linear->in_features(),
                      "weights: ", source.path(), ": ", qkv_module, ".weight ", shape_string(info.shape), " is not [3 x ",
                      linear->out_features(), ", ", linear->in_features(), "]");
      const std::string scale_name = scale_of(source, qkv_module);
      Tensor scale = ones({1}, DType::F32);
      if (!scale_name.empty()) {
        scale = read_scale(source, scale_name, info.shape[0]);
        if (scale.size(0) > 1) scale = scale.narrow(0, part * linear->out_features(), linear->out_features());
        used_scales.insert(scale_name);
      }
      make_float8(path, *linear, scale.shape());
      const Device device = linear->weight_.device();
      Tensor codes = source.get(qkv_module + ".weight").reshape(info.shape);
      model.parameter(path + ".weight") =
          codes.narrow(0, part * linear->out_features(), linear->out_features()).to(device);
      model.parameter(path + ".weight_scale") = scale.contiguous().to(device);
      plan.prefilled.push_back(path + ".weight");
      plan.prefilled.push_back(path + ".weight_scale");
      continue;
    }
    // Any other Linear: its weight under its own name or a rename.
    auto rule = renames.find(path + ".weight");
    const std::string source_weight = rule == renames.end() ? path + ".weight" : rule->second.sources.at(0);
    if (!is_float8(source, prefix + source_weight)) continue;
    WICK_CHECK_KIND(Data, rule == renames.end() || rule->second.kind == KeyRuleKind::Rename, "weights: ",
                    source.path(), ": the float8 weight of ", path, " comes through a rule that is not a rename");
    const std::string source_module = source_weight.substr(0, source_weight.size() - 7);
    const std::string scale_name = scale_of(source, prefix + source_module);
    Shape scale_shape{1};
    if (scale_name.empty()) {
      plan.prefilled.push_back(path + ".weight_scale");
    } else {
      scale_shape = {numel(read_scale(source, scale_name, linear->out_features()).shape())};
      used_scales.insert(scale_name);
      plan.format.format.rules.push_back(rename(path + ".weight_scale", scale_name.substr(prefix.size())));
    }
    make_float8(path, *linear, scale_shape);
  }
  // Everything else a float8 file carries beside the codes: the fused qkv (read above), activation
  // scales and markers (unused: wick multiplies in the compute dtype).
  for (const std::string& name : source.names()) {
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string local = name.substr(prefix.size());
    const bool fused = fused_float8 && (ends_with(local, ".attention.qkv.weight") ||
                                        ends_with(local, ".attention.qkv.scale_weight") ||
                                        ends_with(local, ".attention.qkv.weight_scale"));
    const bool scale = ends_with(local, ".scale_weight") || ends_with(local, ".weight_scale");
    if (fused || (is_float8_companion(local) && !scale)) plan.format.format.ignored.push_back(local);
    WICK_CHECK_KIND(Data, !scale || used_scales.count(name), "weights: ", source.path(), ": the float8 scale ", name,
                    " belongs to no Linear whose weight is F8_E4M3");
  }
  return plan;
}

}  // namespace

const WeightFormat& diffusers_format() {
  static const WeightFormat format{.name = "diffusers",
                                   .detect_keys = {"all_x_embedder.2-1.weight", "layers.0.attention.to_q.weight"},
                                   .prefixes = {""},
                                   .rules = {},
                                   .blocks = {}};
  return format;
}

const WeightFormat& comfyui_format() {
  static const WeightFormat format = make_comfyui_format(/*with_qkv_split=*/true);
  return format;
}

const std::vector<WeightFormat>& weight_formats() {
  static const std::vector<WeightFormat> formats = {diffusers_format(), comfyui_format()};
  return formats;
}

DetectedFormat detect_weight_format(const WeightSource& source) { return detect_format(source, weight_formats()); }

LoadedZImage load_transformer(const WeightSource& source, const LoadOptions& options) {
  LoadedZImage out;
  out.format = detect_weight_format(source);
  std::map<std::string, Shape> shapes;
  for (const auto& [name, shape] : mapped_shapes(source, out.format))
    if (!is_float8_companion(name)) shapes[name] = shape;
  ZImageConfig config = config_from_shapes(shapes, options.rope ? *options.rope : rope_from_config_json(source.path()));
  config.dtype = options.dtype;
  config.device = options.device;
  config.initialize = false;
  out.model = std::make_shared<ZImageTransformer>(config);
  Float8Plan f8 = prepare_float8(*out.model, source, out.format);
  out.report = load_mapped(*out.model, source, f8.format, LoadMappedOptions{.trainable = false, .prefilled = f8.prefilled});
  out.float8_layers = f8.layers;
  return out;
}

}  // namespace wick::zimage
