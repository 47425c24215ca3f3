#include "models/flux/flux_weights.h"

#include <utility>

namespace wick::flux {
namespace {

// BFL module <- diffusers module, for every Linear that is one layer in both (the tables below and the
// LoRA layout share them). "{N}" is the block index.
const std::vector<std::pair<std::string, std::string>> kGlobalLayers = {
    {"img_in", "x_embedder"},
    {"txt_in", "context_embedder"},
    {"time_in.in_layer", "time_text_embed.timestep_embedder.linear_1"},
    {"time_in.out_layer", "time_text_embed.timestep_embedder.linear_2"},
    {"guidance_in.in_layer", "time_text_embed.guidance_embedder.linear_1"},
    {"guidance_in.out_layer", "time_text_embed.guidance_embedder.linear_2"},
    {"vector_in.in_layer", "time_text_embed.text_embedder.linear_1"},
    {"vector_in.out_layer", "time_text_embed.text_embedder.linear_2"},
    {"final_layer.linear", "proj_out"},
};
const std::vector<std::pair<std::string, std::string>> kDoubleLayers = {
    {"double_blocks.{N}.img_mod.lin", "transformer_blocks.{N}.norm1.linear"},
    {"double_blocks.{N}.txt_mod.lin", "transformer_blocks.{N}.norm1_context.linear"},
    {"double_blocks.{N}.img_attn.proj", "transformer_blocks.{N}.attn.to_out.0"},
    {"double_blocks.{N}.txt_attn.proj", "transformer_blocks.{N}.attn.to_add_out"},
    {"double_blocks.{N}.img_mlp.0", "transformer_blocks.{N}.ff.net.0.proj"},
    {"double_blocks.{N}.img_mlp.2", "transformer_blocks.{N}.ff.net.2"},
    {"double_blocks.{N}.txt_mlp.0", "transformer_blocks.{N}.ff_context.net.0.proj"},
    {"double_blocks.{N}.txt_mlp.2", "transformer_blocks.{N}.ff_context.net.2"},
};
const std::vector<std::pair<std::string, std::string>> kSingleLayers = {
    {"single_blocks.{N}.linear2", "single_transformer_blocks.{N}.proj_out"},
    {"single_blocks.{N}.modulation.lin", "single_transformer_blocks.{N}.norm.linear"},
};
const char* const kFinalModulation = "final_layer.adaLN_modulation.1";
const char* const kFinalModulationDiffusers = "norm_out.linear";
const std::vector<std::string> kImgQkv = {"attn.to_q", "attn.to_k", "attn.to_v"};
const std::vector<std::string> kTxtQkv = {"attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj"};
const std::vector<std::string> kLinear1 = {"attn.to_q", "attn.to_k", "attn.to_v", "proj_mlp"};

WeightFormat make_diffusers_format() {
  WeightFormat format{.name = "diffusers",
                      .detect_keys = {"transformer_blocks.0.attn.norm_added_k.weight"},
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
  singles.rules.push_back(concat_layer("single_blocks.{N}.linear1", prefixed(s, kLinear1)));
  singles.rules.push_back(rename("single_blocks.{N}.norm.query_norm.scale", s + "attn.norm_q.weight"));
  singles.rules.push_back(rename("single_blocks.{N}.norm.key_norm.scale", s + "attn.norm_k.weight"));

  format.blocks = {doubles, singles};
  return format;
}

}  // namespace

const WeightFormat& bfl_format() {
  static const WeightFormat format{.name = "bfl",
                                   .detect_keys = {"double_blocks.0.img_attn.norm.key_norm.scale"},
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

LayoutSizes layout_sizes(const std::map<std::string, Shape>& bfl_shapes) {
  auto img_in = bfl_shapes.find("img_in.weight");
  WICK_CHECK_KIND(Data, img_in != bfl_shapes.end() && img_in->second.size() == 2,
                  "flux: no img_in.weight [hidden, in] among the weights, so the hidden size is unknown (not Flux in "
                  "BFL names?)");
  LayoutSizes sizes;
  sizes.hidden = img_in->second[0];
  std::vector<std::string> names;
  for (const auto& [name, shape] : bfl_shapes) names.push_back(name);
  sizes.n_double = count_blocks(names, "double_blocks.");
  sizes.n_single = count_blocks(names, "single_blocks.");
  if (auto mlp = bfl_shapes.find("double_blocks.0.img_mlp.0.weight"); mlp != bfl_shapes.end())
    sizes.mlp_hidden = mlp->second.at(0);
  else if (auto linear1 = bfl_shapes.find("single_blocks.0.linear1.weight"); linear1 != bfl_shapes.end())
    sizes.mlp_hidden = linear1->second.at(0) - 3 * sizes.hidden;
  return sizes;
}

LoraLayout lora_layout(const LayoutSizes& sizes) {
  LoraLayout layout;
  const int64_t h = sizes.hidden;
  add_one_to_one(layout, kGlobalLayers, -1);
  layout.modules.push_back(
      {.module = kFinalModulation, .parts = {{.peft_module = kFinalModulationDiffusers, .swap_halves = true}}});
  for (int64_t n = 0; n < sizes.n_double; ++n) {
    const std::string peft_block = "transformer_blocks." + std::to_string(n) + ".";
    const std::string block = "double_blocks." + std::to_string(n) + ".";
    layout.modules.push_back(fused_layout(block + "img_attn.qkv", peft_block, kImgQkv, {h, h, h}));
    layout.modules.push_back(fused_layout(block + "txt_attn.qkv", peft_block, kTxtQkv, {h, h, h}));
    add_one_to_one(layout, kDoubleLayers, n);
  }
  for (int64_t n = 0; n < sizes.n_single; ++n) {
    const std::string peft_block = "single_transformer_blocks." + std::to_string(n) + ".";
    layout.modules.push_back(fused_layout("single_blocks." + std::to_string(n) + ".linear1", peft_block, kLinear1,
                                          {h, h, h, sizes.mlp_hidden}));
    add_one_to_one(layout, kSingleLayers, n);
  }
  return layout;
}

}  // namespace wick::flux
