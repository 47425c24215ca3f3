#include "models/t5/t5_config.h"

#include <set>
#include <vector>

#include "models/weights/key_map.h"
#include "runtime/error.h"

namespace wick::t5 {
namespace {

const char* const kEmbedding = "shared.weight";
const char* const kBias = "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight";
const char* const kQuery = "encoder.block.0.layer.0.SelfAttention.q.weight";
const char* const kGate = "encoder.block.0.layer.1.DenseReluDense.wi_0.weight";

const Shape& require(const std::map<std::string, Shape>& shapes, const std::string& name, const char* what) {
  auto it = shapes.find(name);
  WICK_CHECK_KIND(Data, it != shapes.end(), "T5 config: tensor '", name, "' is missing (it gives ", what,
                  "; expected transformers' T5EncoderModel names)");
  WICK_CHECK_KIND(Data, it->second.size() == 2 && numel(it->second) > 0, "T5 config: tensor '", name,
                  "' has shape ", it->second, ", expected a non-empty matrix (it gives ", what, ")");
  return it->second;
}

std::string block(int64_t n) { return "encoder.block." + std::to_string(n) + "."; }

}  // namespace

void validate(const T5Config& c) {
  WICK_CHECK_KIND(Config, c.vocab_size > 0 && c.d_model > 0 && c.d_kv > 0 && c.n_heads > 0 && c.d_ff > 0 &&
                              c.n_layers > 0,
                  "T5: vocab_size ", c.vocab_size, ", d_model ", c.d_model, ", d_kv ", c.d_kv, ", n_heads ",
                  c.n_heads, ", d_ff ", c.d_ff, " and n_layers ", c.n_layers, " must all be positive");
  WICK_CHECK_KIND(Config, c.n_buckets >= 4 && c.n_buckets % 2 == 0, "T5: n_buckets ", c.n_buckets,
                  " must be even and at least 4 (half per direction, half of those exact)");
  WICK_CHECK_KIND(Config, c.max_distance > c.n_buckets / 4, "T5: max_distance ", c.max_distance,
                  " must exceed the ", c.n_buckets / 4, " exactly bucketed distances");
  WICK_CHECK_KIND(Config, c.eps > 0, "T5: eps must be positive, got ", c.eps);
  WICK_CHECK_KIND(Config, c.dtype == DType::F32 || c.dtype == DType::BF16, "T5: dtype ", dtype_name(c.dtype),
                  " is not supported: use bf16 or f32 (T5-XXL's activations overflow float16; a float16 file such as "
                  "t5xxl_fp16.safetensors loads into either)");
}

std::map<std::string, Shape> parameter_shapes(const T5Config& c) {
  std::map<std::string, Shape> out;
  out[kEmbedding] = {c.vocab_size, c.d_model};
  for (int64_t n = 0; n < c.n_layers; ++n) {
    const std::string attention = block(n) + "layer.0.", ffn = block(n) + "layer.1.";
    out[attention + "layer_norm.weight"] = {c.d_model};
    for (const char* projection : {"q", "k", "v"})
      out[attention + "SelfAttention." + projection + ".weight"] = {c.inner_dim(), c.d_model};
    out[attention + "SelfAttention.o.weight"] = {c.d_model, c.inner_dim()};
    if (n == 0 || c.bias_per_block)
      out[attention + "SelfAttention.relative_attention_bias.weight"] = {c.n_buckets, c.n_heads};
    out[ffn + "layer_norm.weight"] = {c.d_model};
    out[ffn + "DenseReluDense.wi_0.weight"] = {c.d_ff, c.d_model};
    out[ffn + "DenseReluDense.wi_1.weight"] = {c.d_ff, c.d_model};
    out[ffn + "DenseReluDense.wo.weight"] = {c.d_model, c.d_ff};
  }
  out["encoder.final_layer_norm.weight"] = {c.d_model};
  return out;
}

T5Config config_from_shapes(const std::map<std::string, Shape>& shapes) {
  T5Config c;
  WICK_CHECK_KIND(Data, !shapes.count("encoder.block.0.layer.1.DenseReluDense.wi.weight"),
                  "T5 config: encoder.block.0.layer.1.DenseReluDense.wi.weight is a non-gated (ReLU) FFN, T5 v1.0; "
                  "wick implements T5 v1.1's gated-GELU encoder (wi_0, wi_1), the one Flux and SD3 use");
  const Shape& embedding = require(shapes, kEmbedding, "vocab_size and d_model");
  c.vocab_size = embedding[0];
  c.d_model = embedding[1];
  const Shape& bias = require(shapes, kBias, "n_buckets and n_heads");
  c.n_buckets = bias[0];
  c.n_heads = bias[1];
  const Shape& query = require(shapes, kQuery, "d_kv (rows / heads)");
  WICK_CHECK_KIND(Data, query[0] % c.n_heads == 0, "T5 config: ", kQuery, " ", query, " does not split into the ",
                  c.n_heads, " heads of ", kBias, " ", bias);
  c.d_kv = query[0] / c.n_heads;
  c.d_ff = require(shapes, kGate, "d_ff")[0];
  std::vector<std::string> names;
  for (const auto& [name, shape] : shapes) names.push_back(name);
  c.n_layers = count_blocks(names, "encoder.block.");
  c.bias_per_block = shapes.count("encoder.block.1.layer.0.SelfAttention.relative_attention_bias.weight") != 0;
  validate(c);

  // Every parameter of that model with its shape (umT5: a bias table in every block), and no tensor left over.
  const std::map<std::string, Shape> expected = parameter_shapes(c);
  for (const auto& [name, shape] : expected) {
    auto it = shapes.find(name);
    WICK_CHECK_KIND(Data, it != shapes.end(), "T5 config: tensor '", name, "' is missing (expected shape ", shape,
                    " for a ", c.bias_per_block ? "umT5" : "T5 v1.1", " encoder of d_model ", c.d_model, ", ",
                    c.n_heads, " heads of ", c.d_kv, ", d_ff ", c.d_ff, ", ", c.n_layers, " blocks)");
    WICK_CHECK_KIND(Data, it->second == shape, "T5 config: tensor '", name, "' has shape ", it->second,
                    " but d_model ", c.d_model, ", ", c.n_heads, " heads of ", c.d_kv, ", d_ff ", c.d_ff,
                    " (read from shared, relative_attention_bias, q, wi_0 of block 0) require ", shape);
  }
  for (const auto& [name, shape] : shapes)
    WICK_CHECK_KIND(Data, expected.count(name), "T5 config: tensor '", name, "' ", shape, " is not a parameter of a ",
                    c.bias_per_block ? "umT5" : "T5 v1.1", " encoder (decoder tensors are not read)");
  return c;
}

}  // namespace wick::t5
