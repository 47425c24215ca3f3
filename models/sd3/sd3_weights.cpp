#include "models/sd3/sd3_weights.h"

#include <utility>

namespace wick::sd3 {
namespace {

// SAI module <- diffusers module, for every Linear that is one layer in both (the weight map and the
// LoRA layout share them). "{N}" is the block index.
const std::vector<std::pair<std::string, std::string>> kGlobalLayers = {
    {"context_embedder", "context_embedder"},
    {"t_embedder.mlp.0", "time_text_embed.timestep_embedder.linear_1"},
    {"t_embedder.mlp.2", "time_text_embed.timestep_embedder.linear_2"},
    {"y_embedder.mlp.0", "time_text_embed.text_embedder.linear_1"},
    {"y_embedder.mlp.2", "time_text_embed.text_embedder.linear_2"},
    {"final_layer.linear", "proj_out"},
};
// Every block's one-to-one Linears, context_block.adaLN_modulation.1 aside (swapped in the last block).
const std::vector<std::pair<std::string, std::string>> kBlockLayers = {
    {"joint_blocks.{N}.x_block.adaLN_modulation.1", "transformer_blocks.{N}.norm1.linear"},
    {"joint_blocks.{N}.x_block.attn.proj", "transformer_blocks.{N}.attn.to_out.0"},
    {"joint_blocks.{N}.x_block.attn2.proj", "transformer_blocks.{N}.attn2.to_out.0"},
    {"joint_blocks.{N}.x_block.mlp.fc1", "transformer_blocks.{N}.ff.net.0.proj"},
    {"joint_blocks.{N}.x_block.mlp.fc2", "transformer_blocks.{N}.ff.net.2"},
    {"joint_blocks.{N}.context_block.attn.proj", "transformer_blocks.{N}.attn.to_add_out"},
    {"joint_blocks.{N}.context_block.mlp.fc1", "transformer_blocks.{N}.ff_context.net.0.proj"},
    {"joint_blocks.{N}.context_block.mlp.fc2", "transformer_blocks.{N}.ff_context.net.2"},
};
// QK RMSNorm scales (tensors, not layers).
const std::vector<std::pair<std::string, std::string>> kBlockNorms = {
    {"joint_blocks.{N}.x_block.attn.ln_q.weight", "transformer_blocks.{N}.attn.norm_q.weight"},
    {"joint_blocks.{N}.x_block.attn.ln_k.weight", "transformer_blocks.{N}.attn.norm_k.weight"},
    {"joint_blocks.{N}.x_block.attn2.ln_q.weight", "transformer_blocks.{N}.attn2.norm_q.weight"},
    {"joint_blocks.{N}.x_block.attn2.ln_k.weight", "transformer_blocks.{N}.attn2.norm_k.weight"},
    {"joint_blocks.{N}.context_block.attn.ln_q.weight", "transformer_blocks.{N}.attn.norm_added_q.weight"},
    {"joint_blocks.{N}.context_block.attn.ln_k.weight", "transformer_blocks.{N}.attn.norm_added_k.weight"},
};
// The fused projections: SAI module, the diffusers parts (each hidden rows) under transformer_blocks.N.
struct Fused {
  std::string module;
  std::vector<std::string> parts;
};
const std::vector<Fused> kFusedQkv = {
    {"x_block.attn.qkv", {"attn.to_q", "attn.to_k", "attn.to_v"}},
    {"x_block.attn2.qkv", {"attn2.to_q", "attn2.to_k", "attn2.to_v"}},
    {"context_block.attn.qkv", {"attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj"}},
};
const char* const kContextModulation = "context_block.adaLN_modulation.1";
const char* const kContextModulationDiffusers = "norm1_context.linear";
const char* const kFinalModulation = "final_layer.adaLN_modulation.1";
const char* const kFinalModulationDiffusers = "norm_out.linear";

std::string block_name(const std::string& pattern, int64_t block) {
  std::string out = pattern;
  for (size_t at = out.find("{N}"); at != std::string::npos; at = out.find("{N}"))
    out.replace(at, 3, std::to_string(block));
  return out;
}

std::string sai_block(int64_t n) { return "joint_blocks." + std::to_string(n) + "."; }
std::string diffusers_block(int64_t n) { return "transformer_blocks." + std::to_string(n) + "."; }

}  // namespace

const WeightFormat& sai_format() {
  static const WeightFormat format{.name = "sai",
                                   .detect_keys = {"x_embedder.proj.weight", "joint_blocks.0.x_block.attn.qkv.weight"},
                                   .prefixes = {"", "model.diffusion_model.", "diffusion_model."},
                                   .rules = {},
                                   .blocks = {}};
  return format;
}

WeightFormat diffusers_format(int64_t n_blocks) {
  WeightFormat format{.name = "diffusers",
                      .detect_keys = {"pos_embed.proj.weight", "transformer_blocks.0.attn.add_q_proj.weight"},
                      .prefixes = {""},
                      .rules = {},
                      .blocks = {}};
  format.rules.push_back(rename_layer("x_embedder.proj", "pos_embed.proj"));
  format.rules.push_back(rename("pos_embed", "pos_embed.pos_embed"));
  for (const auto& [sai, diffusers] : kGlobalLayers) format.rules.push_back(rename_layer(sai, diffusers));
  format.rules.push_back(swap_halves_layer(kFinalModulation, kFinalModulationDiffusers));
  // The context stream's modulation: AdaLayerNormZero (same order) in every block but the last, whose
  // AdaLayerNormContinuous is (scale, shift).
  for (int64_t n = 0; n < n_blocks; ++n) {
    const std::string target = sai_block(n) + kContextModulation;
    const std::string source = diffusers_block(n) + kContextModulationDiffusers;
    format.rules.push_back(n == n_blocks - 1 ? swap_halves_layer(target, source) : rename_layer(target, source));
  }
  BlockRules blocks{.count_prefix = "transformer_blocks.", .rules = {}};
  for (const auto& [sai, diffusers] : kBlockLayers) blocks.rules.push_back(rename_layer(sai, diffusers));
  for (const auto& [sai, diffusers] : kBlockNorms) blocks.rules.push_back(rename(sai, diffusers));
  for (const Fused& fused : kFusedQkv) {
    std::vector<std::string> sources;
    for (const std::string& part : fused.parts) sources.push_back("transformer_blocks.{N}." + part);
    blocks.rules.push_back(concat_layer("joint_blocks.{N}." + fused.module, sources));
  }
  format.blocks = {blocks};
  return format;
}

std::vector<WeightFormat> weight_formats(const WeightSource& source) {
  return {sai_format(), diffusers_format(count_blocks(source.names(), "transformer_blocks."))};
}

DetectedFormat detect_weight_format(const WeightSource& source) {
  return detect_format(source, weight_formats(source));
}

LayoutSizes layout_sizes(const std::map<std::string, Shape>& sai_shapes) {
  auto proj = sai_shapes.find("x_embedder.proj.weight");
  WICK_CHECK_KIND(Data, proj != sai_shapes.end() && !proj->second.empty(),
                  "sd3: no x_embedder.proj.weight [hidden, C, p, p] among the weights, so the hidden size is unknown "
                  "(not an SD3 MMDiT in Stability AI's names?)");
  std::vector<std::string> names;
  for (const auto& [name, shape] : sai_shapes) names.push_back(name);
  return {.hidden = proj->second[0], .n_blocks = count_blocks(names, "joint_blocks.")};
}

LoraLayout lora_layout(const LayoutSizes& sizes) {
  LoraLayout layout;
  const int64_t h = sizes.hidden;
  for (const auto& [sai, diffusers] : kGlobalLayers)
    layout.modules.push_back({.module = sai, .parts = {{.peft_module = diffusers}}});
  layout.modules.push_back(
      {.module = kFinalModulation, .parts = {{.peft_module = kFinalModulationDiffusers, .swap_halves = true}}});
  for (int64_t n = 0; n < sizes.n_blocks; ++n) {
    const std::string sai = sai_block(n), diffusers = diffusers_block(n);
    for (const Fused& fused : kFusedQkv) {
      LoraModuleLayout entry{.module = sai + fused.module, .parts = {}};
      for (size_t i = 0; i < fused.parts.size(); ++i) {
        const auto begin = static_cast<int64_t>(i) * h;
        entry.parts.push_back({.peft_module = diffusers + fused.parts[i], .row_begin = begin, .row_end = begin + h});
      }
      layout.modules.push_back(entry);
    }
    for (const auto& [sai_layer, diffusers_layer] : kBlockLayers)
      layout.modules.push_back(
          {.module = block_name(sai_layer, n), .parts = {{.peft_module = block_name(diffusers_layer, n)}}});
    layout.modules.push_back({.module = sai + kContextModulation,
                              .parts = {{.peft_module = diffusers + kContextModulationDiffusers,
                                         .swap_halves = n == sizes.n_blocks - 1}}});
  }
  return layout;
}

}  // namespace wick::sd3
