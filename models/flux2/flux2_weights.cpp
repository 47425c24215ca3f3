#include "models/flux2/flux2_weights.h"

#include <filesystem>
#include <fstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "runtime/error.h"

namespace wick::flux2 {
namespace {

// BFL module <- diffusers module, for every Linear that is one layer in both (the weight rules and the
// LoRA layout share them). "{N}" is the block index.
const std::vector<std::pair<std::string, std::string>> kGlobalLayers = {
    {"img_in", "x_embedder"},
    {"txt_in", "context_embedder"},
    {"time_in.in_layer", "time_guidance_embed.timestep_embedder.linear_1"},
    {"time_in.out_layer", "time_guidance_embed.timestep_embedder.linear_2"},
    {"guidance_in.in_layer", "time_guidance_embed.guidance_embedder.linear_1"},
    {"guidance_in.out_layer", "time_guidance_embed.guidance_embedder.linear_2"},
    {"double_stream_modulation_img.lin", "double_stream_modulation_img.linear"},
    {"double_stream_modulation_txt.lin", "double_stream_modulation_txt.linear"},
    {"single_stream_modulation.lin", "single_stream_modulation.linear"},
    {"final_layer.linear", "proj_out"},
};
const std::vector<std::pair<std::string, std::string>> kDoubleLayers = {
    {"double_blocks.{N}.img_attn.proj", "transformer_blocks.{N}.attn.to_out.0"},
    {"double_blocks.{N}.txt_attn.proj", "transformer_blocks.{N}.attn.to_add_out"},
    {"double_blocks.{N}.img_mlp.0", "transformer_blocks.{N}.ff.linear_in"},
    {"double_blocks.{N}.img_mlp.2", "transformer_blocks.{N}.ff.linear_out"},
    {"double_blocks.{N}.txt_mlp.0", "transformer_blocks.{N}.ff_context.linear_in"},
    {"double_blocks.{N}.txt_mlp.2", "transformer_blocks.{N}.ff_context.linear_out"},
};
const std::vector<std::pair<std::string, std::string>> kSingleLayers = {
    {"single_blocks.{N}.linear1", "single_transformer_blocks.{N}.attn.to_qkv_mlp_proj"},
    {"single_blocks.{N}.linear2", "single_transformer_blocks.{N}.attn.to_out"},
};
const char* const kFinalModulation = "final_layer.adaLN_modulation.1";
const char* const kFinalModulationDiffusers = "norm_out.linear";
const std::vector<std::string> kImgQkv = {"attn.to_q", "attn.to_k", "attn.to_v"};
const std::vector<std::string> kTxtQkv = {"attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj"};

WeightFormat make_diffusers_format() {
  WeightFormat format{.name = "diffusers",
                      .detect_keys = {"single_stream_modulation.linear.weight"},
                      .prefixes = {""},
                      .rules = layer_renames(kGlobalLayers),
                      .blocks = {}};
  format.rules.push_back(swap_halves_layer(kFinalModulation, kFinalModulationDiffusers));

  BlockRules doubles{.count_prefix = "transformer_blocks.", .rules = layer_renames(kDoubleLayers)};
  const std::string d = "transformer_blocks.{N}.";
  doubles.rules.push_back(concat_layer("double_blocks.{N}.img_attn.qkv", prefixed(d, kImgQkv)));
  doubles.rules.push_back(concat_layer("double_blocks.{N}.txt_attn.qkv", prefixed(d, kTxtQkv)));
  doubles.rules.push_back(rename("double_blocks.{N}.img_attn.norm.query_norm.scale", d + "attn.norm_q.weight"));
  doubles.rules.push_back(rename("double_blocks.{N}.img_attn.norm.key_norm.scale", d + "attn.norm_k.weight"));
  doubles.rules.push_back(rename("double_blocks.{N}.txt_attn.norm.query_norm.scale", d + "attn.norm_added_q.weight"));
  doubles.rules.push_back(rename("double_blocks.{N}.txt_attn.norm.key_norm.scale", d + "attn.norm_added_k.weight"));

  BlockRules singles{.count_prefix = "single_transformer_blocks.", .rules = layer_renames(kSingleLayers)};
  const std::string s = "single_transformer_blocks.{N}.";
  singles.rules.push_back(rename("single_blocks.{N}.norm.query_norm.scale", s + "attn.norm_q.weight"));
  singles.rules.push_back(rename("single_blocks.{N}.norm.key_norm.scale", s + "attn.norm_k.weight"));

  format.blocks = {doubles, singles};
  return format;
}

}  // namespace

const WeightFormat& bfl_format() {
  static const WeightFormat format{.name = "bfl",
                                   .detect_keys = {"single_stream_modulation.lin.weight"},
                                   .prefixes = {"", "model.diffusion_model.", "diffusion_model."},
                                   .rules = {},
                                   .blocks = {}};
  return format;
}

const WeightFormat& diffusers_format() {
  static const WeightFormat format = make_diffusers_format();
  return format;
}

const std::vector<WeightFormat>& weight_formats() {
  static const std::vector<WeightFormat> formats = {bfl_format(), diffusers_format()};
  return formats;
}

DetectedFormat detect_weight_format(const WeightSource& source) { return detect_format(source, weight_formats()); }

std::vector<int64_t> axes_dim_of(const std::string& weights_path) {
  namespace fs = std::filesystem;
  const fs::path path(weights_path);
  std::vector<fs::path> candidates;
  if (fs::is_directory(path))
    candidates = {path / "config.json", path / "transformer" / "config.json"};
  else
    candidates = {path.parent_path() / "config.json"};
  for (const fs::path& candidate : candidates) {
    if (!fs::is_regular_file(candidate)) continue;
    std::ifstream in(candidate);
    nlohmann::json json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (json.is_discarded() || !json.is_object() || !json.contains("axes_dims_rope")) continue;
    try {
      return json.at("axes_dims_rope").get<std::vector<int64_t>>();
    } catch (const nlohmann::json::exception& e) {
      WICK_FAIL(Data, "FLUX.2: ", candidate.string(), ": axes_dims_rope is malformed (", e.what(), ")");
    }
  }
  return {};
}

LoadedFlux2 load_transformer(const WeightSource& source, const LoadOptions& options) {
  LoadedFlux2 out;
  out.format = detect_weight_format(source);
  Flux2Config config = config_from_shapes(mapped_shapes(source, out.format),
                                          options.axes_dim.empty() ? axes_dim_of(source.path()) : options.axes_dim);
  config.dtype = options.dtype;
  config.device = options.device;
  config.initialize = false;
  out.model = std::make_shared<Flux2Transformer>(config);
  out.report = load_mapped(*out.model, source, out.format, LoadMappedOptions{.trainable = false});
  out.model->set_weight_origin({.layout = out.format.format.name, .prefix = out.format.prefix, .path = source.path()});
  return out;
}

LayoutSizes layout_sizes(const std::map<std::string, Shape>& bfl_shapes) {
  auto img_in = bfl_shapes.find("img_in.weight");
  WICK_CHECK_KIND(Data, img_in != bfl_shapes.end() && img_in->second.size() == 2,
                  "flux2: no img_in.weight [hidden, in] among the weights, so the hidden size is unknown (not FLUX.2 "
                  "in BFL names?)");
  LayoutSizes sizes;
  sizes.hidden = img_in->second[0];
  std::vector<std::string> names;
  for (const auto& [name, shape] : bfl_shapes) names.push_back(name);
  sizes.n_double = count_blocks(names, "double_blocks.");
  sizes.n_single = count_blocks(names, "single_blocks.");
  return sizes;
}

LoraLayout lora_layout(const LayoutSizes& sizes) {
  LoraLayout layout;
  add_one_to_one(layout, kGlobalLayers, -1);
  layout.modules.push_back(
      {.module = kFinalModulation, .parts = {{.peft_module = kFinalModulationDiffusers, .swap_halves = true}}});
  for (int64_t n = 0; n < sizes.n_double; ++n) {
    const std::string peft_block = "transformer_blocks." + std::to_string(n) + ".";
    const std::string block = "double_blocks." + std::to_string(n) + ".";
    const std::vector<int64_t> rows(3, sizes.hidden);
    layout.modules.push_back(fused_layout(block + "img_attn.qkv", peft_block, kImgQkv, rows));
    layout.modules.push_back(fused_layout(block + "txt_attn.qkv", peft_block, kTxtQkv, rows));
    add_one_to_one(layout, kDoubleLayers, n);
  }
  for (int64_t n = 0; n < sizes.n_single; ++n) add_one_to_one(layout, kSingleLayers, n);
  return layout;
}

}  // namespace wick::flux2
