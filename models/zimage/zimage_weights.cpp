#include "models/zimage/zimage_weights.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <set>
#include <utility>

#include "engine/autograd/node.h"
#include "models/nn/linear.h"
#include "models/weights/float8_weights.h"
#include "runtime/error.h"
#include "runtime/atomic_file.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/join.h"
#include "runtime/safetensors.h"

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
  WeightFormat format{
      .name = "comfyui",
      .detect_keys = {"x_embedder.weight", "layers.0.attention.qkv.weight"},
      .prefixes = {"", "model.diffusion_model.", "diffusion_model."},
      .rules = {rename_layer("all_x_embedder.2-1", "x_embedder"),
                rename_layer("all_final_layer.2-1.linear", "final_layer.linear"),
                rename_layer("all_final_layer.2-1.adaLN_modulation.1", "final_layer.adaLN_modulation.1")},
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
  WICK_CHECK_KIND(Data, info.dtype == "F32" || info.dtype == "BF16" || info.dtype == "F16", "weights: ", source.path(),
                  ": the float8 scale ", name, " is ", info.dtype, ", not a float");
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

// Builds a Float8Plan Linear by Linear (prepare_float8 below drives it).
class Float8Preparer {
 public:
  Float8Preparer(ZImageTransformer& model, const WeightSource& source, const DetectedFormat& detected)
      : model_(model), source_(source), prefix_(detected.prefix), plan_{detected, {}, {}} {}

  // True when a ComfyUI source stores the blocks' fused attention.qkv as F8_E4M3 (all of them, or
  // WickError Data); the format then leaves q, k, v to fused_part.
  bool find_fused_float8() {
    bool float8 = false, plain = false;
    for (const std::string& block : model_.block_paths()) {
      const std::string qkv = prefix_ + block + ".attention.qkv.weight";
      if (plan_.format.format.name == "comfyui" && source_.contains(qkv))
        (is_float8(source_, qkv) ? float8 : plain) = true;
    }
    WICK_CHECK_KIND(Data, !(float8 && plain), "weights: ", source_.path(),
                    ": some blocks' attention.qkv are F8_E4M3 "
                    "and some are not; wick reads float8 files whose fused qkv weights are all float8 or all floating");
    if (float8) plan_.format.format = make_comfyui_format(/*with_qkv_split=*/false);
    fused_ = float8;
    for (const KeyRule& rule : expand_rules(source_, plan_.format)) rules_.emplace(rule.target, rule);
    return float8;
  }

  // to_q / to_k / to_v (part 0, 1, 2) of a fused F8 qkv: rows [part·out, (part+1)·out) of the codes
  // (a zero-copy view on the CPU) and of a per-row scale (or the one per-tensor value).
  void fused_part(const std::string& path, nn::Linear& linear, int64_t part) {
    const std::string qkv = prefix_ + path.substr(0, path.rfind(".attention.")) + ".attention.qkv";
    const SafetensorsInfo& info = source_.info(qkv + ".weight");
    const int64_t rows = linear.out_features();
    WICK_CHECK_KIND(Data, info.shape.size() == 2 && info.shape[0] == 3 * rows && info.shape[1] == linear.in_features(),
                    "weights: ", source_.path(), ": ", qkv, ".weight ", shape_string(info.shape), " is not [3 x ", rows,
                    ", ", linear.in_features(), "]");
    Tensor scale = ones({1}, DType::F32);
    if (const std::string name = scale_of(source_, qkv); !name.empty()) {
      scale = read_scale(source_, name, info.shape[0]);
      if (scale.size(0) > 1) scale = scale.narrow(0, part * rows, rows).contiguous();
      used_scales_.insert(name);
    }
    make_float8(path, linear, scale.shape());
    const Device device = linear.weight_.device();
    model_.parameter(path + ".weight") =
        source_.get(qkv + ".weight").reshape(info.shape).narrow(0, part * rows, rows).to(device);
    model_.parameter(path + ".weight_scale") = scale.to(device);
    plan_.prefilled.push_back(path + ".weight");
    plan_.prefilled.push_back(path + ".weight_scale");
  }

  // Any other Linear whose weight the source stores as F8_E4M3, under its own name or a rename: a
  // float8 Linear whose scale load_mapped reads (or 1 when the file has none).
  void renamed(const std::string& path, nn::Linear& linear) {
    auto rule = rules_.find(path + ".weight");
    const std::string weight = rule == rules_.end() ? path + ".weight" : rule->second.sources.at(0);
    if (!is_float8(source_, prefix_ + weight)) return;
    WICK_CHECK_KIND(Data, rule == rules_.end() || rule->second.kind == KeyRuleKind::Rename, "weights: ", source_.path(),
                    ": the float8 weight of ", path, " comes through a rule that is not a rename");
    const std::string scale_name = scale_of(source_, prefix_ + weight.substr(0, weight.size() - 7));
    Shape scale_shape{1};
    if (scale_name.empty()) {
      plan_.prefilled.push_back(path + ".weight_scale");
    } else {
      scale_shape = {numel(read_scale(source_, scale_name, linear.out_features()).shape())};
      used_scales_.insert(scale_name);
      plan_.format.format.rules.push_back(rename(path + ".weight_scale", scale_name.substr(prefix_.size())));
    }
    make_float8(path, linear, scale_shape);
  }

  // Ignores what a float8 file carries beside the codes (the fused qkv read by fused_part, activation
  // scales, markers: wick multiplies in the compute dtype); a weight scale no Linear took is an error.
  Float8Plan finish() {
    for (const std::string& name : source_.names()) {
      if (name.rfind(prefix_, 0) != 0) continue;
      const std::string local = name.substr(prefix_.size());
      const bool fused = fused_ && local.find(".attention.qkv.") != std::string::npos;
      const bool scale = ends_with(local, ".scale_weight") || ends_with(local, ".weight_scale");
      if (fused || (is_float8_companion(local) && !scale)) plan_.format.format.ignored.push_back(local);
      WICK_CHECK_KIND(Data, !scale || used_scales_.count(name), "weights: ", source_.path(), ": the float8 scale ",
                      name, " belongs to no Linear whose weight is F8_E4M3");
    }
    return plan_;
  }

 private:
  void make_float8(const std::string& path, nn::Linear& linear, const Shape& scale_shape) {
    linear.set_all_trainable(false);
    linear.expect_float8(scale_shape, linear.weight_.device());
    plan_.layers.push_back(path);
  }

  ZImageTransformer& model_;
  const WeightSource& source_;
  const std::string prefix_;
  Float8Plan plan_;
  bool fused_ = false;
  std::map<std::string, KeyRule> rules_;  // by target name
  std::set<std::string> used_scales_;     // source names, with the prefix
};

// Which of q, k, v a module path names (0, 1, 2), or -1.
int64_t qkv_part(const std::string& path) {
  for (int64_t part = 0; part < 3; ++part)
    if (ends_with(path, std::string(".attention.") + kQkv[part])) return part;
  return -1;
}

Float8Plan prepare_float8(ZImageTransformer& model, const WeightSource& source, const DetectedFormat& detected) {
  bool any = false;
  for (const std::string& name : source.names())
    any = any || (name.rfind(detected.prefix, 0) == 0 && is_float8(source, name));
  if (!any) return {detected, {}, {}};
  Float8Preparer preparer(model, source, detected);
  const bool fused = preparer.find_fused_float8();
  for (const auto& [path, module] : model.named_modules()) {
    auto* linear = dynamic_cast<nn::Linear*>(module.get());
    if (!linear || linear->is_float8()) continue;
    if (const int64_t part = qkv_part(path); fused && part >= 0) preparer.fused_part(path, *linear, part);
    else preparer.renamed(path, *linear);
  }
  return preparer.finish();
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
  out.report =
      load_mapped(*out.model, source, f8.format, LoadMappedOptions{.trainable = false, .prefilled = f8.prefilled});
  out.float8_layers = f8.layers;
  out.model->set_weight_origin({.layout = out.format.format.name, .prefix = out.format.prefix, .path = source.path()});
  return out;
}

namespace {

// ComfyUI's tensors of `model`: for every tensor of the base file, the model's parameter its rule reads it into
// (renamed), the parameters split from it concatenated back (qkv), or the base's own tensor when no rule reads it.
std::vector<std::pair<std::string, Tensor>> comfyui_tensors(const ZImageTransformer& model, DType dtype,
                                                            const WeightSource& base, const DetectedFormat& format) {
  std::map<std::string, std::vector<std::pair<int64_t, std::string>>> from_source;  // base name -> (part, parameter)
  for (const KeyRule& rule : expand_rules(base, format)) {
    WICK_CHECK(rule.kind == KeyRuleKind::Rename || rule.kind == KeyRuleKind::SplitRows,
               "export_transformer: a ComfyUI rule that is neither a rename nor a row split (", rule.target, ")");
    from_source[format.prefix + rule.sources.at(0)].emplace_back(rule.part, rule.target);
  }
  std::map<std::string, Tensor> parameters;
  for (const auto& [parameter, tensor] : model.named_parameters()) parameters.emplace(parameter, tensor);
  std::vector<std::pair<std::string, Tensor>> out;
  for (const std::string& name : base.names()) {
    auto found = from_source.find(name);
    if (found == from_source.end()) {
      out.emplace_back(name, base.get(name));  // not the model's (norm_final)
      continue;
    }
    std::sort(found->second.begin(), found->second.end());
    std::vector<Tensor> parts;
    for (const auto& [part, parameter] : found->second)
      parts.push_back(autograd::detach(parameters.at(parameter)).to(dtype).to(Device::cpu()));
    out.emplace_back(name, parts.size() == 1 ? parts.front() : concat(parts, 0));
  }
  return out;
}

}  // namespace

std::filesystem::path export_transformer(const ZImageTransformer& model, const std::filesystem::path& directory,
                                         const std::string& name, DType dtype,
                                         const std::map<std::string, std::string>& metadata) {
  for (const auto& [parameter, tensor] : model.named_parameters())
    WICK_CHECK_KIND(Config, is_floating(tensor.dtype()), "export_transformer: ",
                    parameter, " is ", dtype_name(tensor.dtype()), "; a full fine-tune exports a model without float8");
  const ZImageWeightOrigin& origin = model.weight_origin();
  std::error_code ec;
  std::filesystem::create_directories(directory, ec);
  if (origin.layout == "comfyui") {
    const WeightSource base = WeightSource::open(origin.path);
    const std::filesystem::path file = directory / (name + ".safetensors");
    save_safetensors(file.string(), comfyui_tensors(model, dtype, base, detect_weight_format(base)), metadata);
    return file;
  }
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [parameter, tensor] : model.named_parameters())
    tensors.emplace_back(parameter, autograd::detach(tensor).to(dtype));
  const std::filesystem::path folder = directory / name;
  std::filesystem::create_directories(folder, ec);
  if (!origin.path.empty()) {
    const std::filesystem::path config = std::filesystem::path(origin.path).parent_path() / "config.json";
    if (std::ifstream in{config}; in)
      write_file_atomically(folder / "config.json",
                            std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()));
  }
  save_safetensors((folder / "diffusion_pytorch_model.safetensors").string(), tensors, metadata);
  return folder;
}

}  // namespace wick::zimage
