#include "models/t5/t5_weights.h"

namespace wick::t5 {
namespace {

const char* const kEmbedding = "shared.weight";

// The tensors of one encoder block, relative to "encoder.block.N." (relative_attention_bias: block 0 only; a rule
// whose source is absent is dropped).
const char* const kBlockTensors[] = {
    "layer.0.layer_norm.weight",
    "layer.0.SelfAttention.q.weight",
    "layer.0.SelfAttention.k.weight",
    "layer.0.SelfAttention.v.weight",
    "layer.0.SelfAttention.o.weight",
    "layer.0.SelfAttention.relative_attention_bias.weight",
    "layer.1.layer_norm.weight",
    "layer.1.DenseReluDense.wi_0.weight",
    "layer.1.DenseReluDense.wi_1.weight",
    "layer.1.DenseReluDense.wo.weight",
};

WeightFormat make_stack_format() {
  WeightFormat format{.name = "t5_stack",
                      .detect_keys = {"block.0.layer.0.SelfAttention.q.weight"},
                      .prefixes = {""},
                      .rules = {first_of(kEmbedding, {kEmbedding, "embed_tokens.weight"}),
                                rename("encoder.final_layer_norm.weight", "final_layer_norm.weight")},
                      .blocks = {}};
  BlockRules blocks{.count_prefix = "block.", .rules = {}};
  for (const char* tensor : kBlockTensors)
    blocks.rules.push_back(rename(std::string("encoder.block.{N}.") + tensor, std::string("block.{N}.") + tensor));
  format.blocks = {blocks};
  return format;
}

// Wan's umT5 names (Wan-Video's T5Encoder state dict; Kijai's wrapper file says `attention` for `attn` and
// `final_norm` for `norm`), relative to "blocks.N." -> transformers' names relative to "encoder.block.N.".
WeightFormat make_wan_format() {
  auto both = [](const std::string& target, const std::string& attn_suffix) {
    return first_of("encoder.block.{N}." + target,
                    {"blocks.{N}.attn." + attn_suffix, "blocks.{N}.attention." + attn_suffix});
  };
  BlockRules blocks{
      .count_prefix = "blocks.",
      .rules = {rename("encoder.block.{N}.layer.0.layer_norm.weight", "blocks.{N}.norm1.weight"),
                both("layer.0.SelfAttention.q.weight", "q.weight"), both("layer.0.SelfAttention.k.weight", "k.weight"),
                both("layer.0.SelfAttention.v.weight", "v.weight"), both("layer.0.SelfAttention.o.weight", "o.weight"),
                rename("encoder.block.{N}.layer.0.SelfAttention.relative_attention_bias.weight",
                       "blocks.{N}.pos_embedding.embedding.weight"),
                rename("encoder.block.{N}.layer.1.layer_norm.weight", "blocks.{N}.norm2.weight"),
                rename("encoder.block.{N}.layer.1.DenseReluDense.wi_0.weight", "blocks.{N}.ffn.gate.0.weight"),
                rename("encoder.block.{N}.layer.1.DenseReluDense.wi_1.weight", "blocks.{N}.ffn.fc1.weight"),
                rename("encoder.block.{N}.layer.1.DenseReluDense.wo.weight", "blocks.{N}.ffn.fc2.weight")}};
  return WeightFormat{.name = "wan",
                      .detect_keys = {"blocks.0.norm1.weight", "blocks.0.pos_embedding.embedding.weight"},
                      .prefixes = {""},
                      .rules = {rename(kEmbedding, "token_embedding.weight"),
                                first_of("encoder.final_layer_norm.weight", {"norm.weight", "final_norm.weight"})},
                      .blocks = {blocks}};
}

}  // namespace

const WeightFormat& wan_format() {
  static const WeightFormat format = make_wan_format();
  return format;
}

const WeightFormat& transformers_format() {
  static const WeightFormat format{.name = "transformers",
                                   .detect_keys = {"encoder.block.0.layer.0.SelfAttention.q.weight"},
                                   .prefixes = {"", "text_encoders.t5xxl.transformer."},
                                   .rules = {first_of(kEmbedding, {kEmbedding, "encoder.embed_tokens.weight"})},
                                   .blocks = {}};
  return format;
}

const WeightFormat& stack_format() {
  static const WeightFormat format = make_stack_format();
  return format;
}

const std::vector<WeightFormat>& weight_formats() {
  static const std::vector<WeightFormat> formats = {transformers_format(), stack_format(), wan_format()};
  return formats;
}

DetectedFormat detect_weight_format(const WeightSource& source) { return detect_format(source, weight_formats()); }

}  // namespace wick::t5
