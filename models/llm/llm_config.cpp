#include "models/llm/llm_config.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "models/weights/float8_weights.h"
#include "models/weights/key_map.h"
#include "runtime/error.h"

namespace wick::llm {
namespace {

const char* const kEmbedding = "embed_tokens.weight";
const char* const kQuery = "layers.0.self_attn.q_proj.weight";
const char* const kKey = "layers.0.self_attn.k_proj.weight";
const char* const kQueryNorm = "layers.0.self_attn.q_norm.weight";
const char* const kQueryBias = "layers.0.self_attn.q_proj.bias";
const char* const kGate = "layers.0.mlp.gate_proj.weight";
const char* const kLmHead = "lm_head.weight";  // a causal LM's head: not part of the encoder

// Every released Qwen3 / Qwen2.5 / Mistral Small model has 128-wide heads.
constexpr int64_t kUsualHeadDim = 128;

const Shape& require(const std::map<std::string, Shape>& shapes, const std::string& source, const std::string& name,
                     size_t rank, const char* what) {
  auto it = shapes.find(name);
  WICK_CHECK_KIND(
      Data, it != shapes.end(), "language model weights ", source, ": tensor '", name, "' is missing (it gives ", what,
      "; expected transformers' Qwen3 / Qwen2 / Mistral names, e.g. model.layers.0.self_attn.q_proj.weight)");
  WICK_CHECK_KIND(Data, it->second.size() == rank && numel(it->second) > 0, "language model weights ", source,
                  ": tensor '", name, "' has shape ", it->second, ", expected ", rank, " non-empty axes (it gives ",
                  what, ")");
  return it->second;
}

std::string layer(int64_t n) { return "layers." + std::to_string(n) + "."; }

LlmFamily family_of(const std::map<std::string, Shape>& shapes) {
  if (shapes.count(kQueryNorm)) return LlmFamily::Qwen3;
  if (shapes.count(kQueryBias)) return LlmFamily::Qwen2;
  return LlmFamily::Mistral;
}

const char* family_evidence(LlmFamily family) {
  switch (family) {
    case LlmFamily::Qwen3: return "it has layers.0.self_attn.q_norm.weight";
    case LlmFamily::Qwen2: return "it has layers.0.self_attn.q_proj.bias and no q_norm";
    case LlmFamily::Mistral: return "it has neither q_norm nor q/k/v biases";
  }
  return "";
}

// A number from `object[key]`, or from object["rope_parameters"][key].
std::optional<double> number(const nlohmann::json& object, const char* key) {
  if (object.contains(key) && object[key].is_number()) return object[key].get<double>();
  if (object.contains("rope_parameters") && object["rope_parameters"].is_object() &&
      object["rope_parameters"].contains(key) && object["rope_parameters"][key].is_number())
    return object["rope_parameters"][key].get<double>();
  return std::nullopt;
}

}  // namespace

const char* family_name(LlmFamily family) {
  switch (family) {
    case LlmFamily::Qwen3: return "qwen3";
    case LlmFamily::Qwen2: return "qwen2";
    case LlmFamily::Mistral: return "mistral";
  }
  return "?";
}

LlmConfig qwen3_4b() { return LlmConfig{}; }

LlmConfig qwen3_8b() {
  LlmConfig c;
  c.hidden_size = 4096;
  c.intermediate_size = 12288;
  return c;
}

LlmConfig qwen2_5_vl_7b() {
  LlmConfig c;
  c.family = LlmFamily::Qwen2;
  c.vocab_size = 152064;
  c.hidden_size = 3584;
  c.intermediate_size = 18944;
  c.n_layers = 28;
  c.n_heads = 28;
  c.n_kv_heads = 4;
  set_family_defaults(c);
  return c;
}

LlmConfig mistral_small_3() {
  LlmConfig c;
  c.family = LlmFamily::Mistral;
  c.vocab_size = 131072;
  c.hidden_size = 5120;
  c.intermediate_size = 32768;
  c.n_layers = 40;
  c.n_heads = 32;
  c.n_kv_heads = 8;
  set_family_defaults(c);
  return c;
}

void set_family_defaults(LlmConfig& c) {
  c.eps = c.family == LlmFamily::Mistral ? 1e-5 : 1e-6;
  c.rope_theta = c.family == LlmFamily::Mistral ? 1e9 : 1e6;
}

void validate(const LlmConfig& c) {
  WICK_CHECK_KIND(Config,
                  c.vocab_size > 0 && c.hidden_size > 0 && c.intermediate_size > 0 && c.n_layers > 0 && c.n_heads > 0 &&
                      c.n_kv_heads > 0 && c.head_dim > 0,
                  "language model: vocab_size ", c.vocab_size, ", hidden_size ", c.hidden_size, ", intermediate_size ",
                  c.intermediate_size, ", n_layers ", c.n_layers, ", n_heads ", c.n_heads, ", n_kv_heads ",
                  c.n_kv_heads, " and head_dim ", c.head_dim, " must all be positive");
  WICK_CHECK_KIND(Config, c.n_heads % c.n_kv_heads == 0, "language model: n_heads ", c.n_heads,
                  " is not a multiple of n_kv_heads ", c.n_kv_heads, " (grouped-query attention)");
  WICK_CHECK_KIND(Config, c.head_dim % 2 == 0, "language model: head_dim ", c.head_dim,
                  " must be even (RoPE rotates pairs)");
  WICK_CHECK_KIND(Config, c.eps > 0 && c.rope_theta > 0, "language model: eps ", c.eps, " and rope_theta ",
                  c.rope_theta, " must be positive");
  WICK_CHECK_KIND(Config, c.dtype == DType::F32 || c.dtype == DType::BF16, "language model: dtype ",
                  dtype_name(c.dtype), " is not supported: use bf16 or f32 (a float16 file loads into either)");
}

std::map<std::string, Shape> parameter_shapes(const LlmConfig& c, int64_t n_layers, bool final_norm) {
  std::map<std::string, Shape> out;
  out[kEmbedding] = {c.vocab_size, c.hidden_size};
  for (int64_t n = 0; n < n_layers; ++n) {
    const std::string attention = layer(n) + "self_attn.", mlp = layer(n) + "mlp.";
    out[attention + "q_proj.weight"] = {c.q_dim(), c.hidden_size};
    out[attention + "k_proj.weight"] = {c.kv_dim(), c.hidden_size};
    out[attention + "v_proj.weight"] = {c.kv_dim(), c.hidden_size};
    out[attention + "o_proj.weight"] = {c.hidden_size, c.q_dim()};
    if (c.has_qkv_bias()) {
      out[attention + "q_proj.bias"] = {c.q_dim()};
      out[attention + "k_proj.bias"] = {c.kv_dim()};
      out[attention + "v_proj.bias"] = {c.kv_dim()};
    }
    if (c.has_qk_norm()) {
      out[attention + "q_norm.weight"] = {c.head_dim};
      out[attention + "k_norm.weight"] = {c.head_dim};
    }
    out[mlp + "gate_proj.weight"] = {c.intermediate_size, c.hidden_size};
    out[mlp + "up_proj.weight"] = {c.intermediate_size, c.hidden_size};
    out[mlp + "down_proj.weight"] = {c.hidden_size, c.intermediate_size};
    out[layer(n) + "input_layernorm.weight"] = {c.hidden_size};
    out[layer(n) + "post_attention_layernorm.weight"] = {c.hidden_size};
  }
  if (final_norm) out["norm.weight"] = {c.hidden_size};
  return out;
}

LlmShapeHints read_config_json(const std::string& weights_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path folder = fs::is_directory(weights_path, ec) ? fs::path(weights_path) : fs::path(weights_path).parent_path();
  fs::path file = folder / "config.json";
  LlmShapeHints hints;
  if (!fs::is_regular_file(file, ec)) return hints;
  std::ifstream in(file);
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    WICK_FAIL(Data, "language model: ", file.string(), " is not valid JSON: ", e.what());
  }
  const nlohmann::json& text =
      json.contains("text_config") && json["text_config"].is_object() ? json["text_config"] : json;
  // Another model's config.json in the same folder (a pipeline's, a vision tower's) says nothing about this one.
  static const char* const kModelTypes[] = {"qwen3",    "qwen2",         "qwen2_5_vl", "qwen2_5_vl_text",
                                            "qwen2_vl", "qwen2_vl_text", "mistral"};
  const std::string model_type =
      text.contains("model_type") && text["model_type"].is_string() ? text["model_type"].get<std::string>() : "";
  if (std::find(std::begin(kModelTypes), std::end(kModelTypes), model_type) == std::end(kModelTypes)) return hints;
  if (text.contains("head_dim") && text["head_dim"].is_number_integer()) {
    hints.head_dim = text["head_dim"].get<int64_t>();
  } else if (text.contains("hidden_size") && text.contains("num_attention_heads") &&
             text["hidden_size"].is_number_integer() && text["num_attention_heads"].is_number_integer() &&
             text["num_attention_heads"].get<int64_t>() > 0) {
    hints.head_dim = text["hidden_size"].get<int64_t>() / text["num_attention_heads"].get<int64_t>();
  }
  hints.eps = number(text, "rms_norm_eps");
  hints.rope_theta = number(text, "rope_theta");
  return hints;
}

LlmConfig config_from_shapes(const std::map<std::string, Shape>& shapes, const std::string& source,
                             const LlmShapeHints& hints) {
  LlmConfig c;
  c.family = family_of(shapes);
  if (hints.family)
    WICK_CHECK_KIND(Data, *hints.family == c.family, "language model weights ", source, " are a ",
                    family_name(c.family), " model (", family_evidence(c.family), "), not the ",
                    family_name(*hints.family), " model required");
  set_family_defaults(c);
  if (hints.eps) c.eps = *hints.eps;
  if (hints.rope_theta) c.rope_theta = *hints.rope_theta;
  const Shape& embedding = require(shapes, source, kEmbedding, 2, "vocab_size and hidden_size");
  c.vocab_size = embedding[0];
  c.hidden_size = embedding[1];
  const int64_t q_width = require(shapes, source, kQuery, 2, "the query width")[0];
  const int64_t kv_width = require(shapes, source, kKey, 2, "the key / value width")[0];
  c.intermediate_size = require(shapes, source, kGate, 2, "intermediate_size")[0];
  if (hints.head_dim > 0) c.head_dim = hints.head_dim;
  else if (c.family == LlmFamily::Qwen3) c.head_dim = require(shapes, source, kQueryNorm, 1, "head_dim")[0];
  else c.head_dim = kUsualHeadDim;
  WICK_CHECK_KIND(Data, q_width % c.head_dim == 0 && kv_width % c.head_dim == 0, "language model weights ", source,
                  ": ", kQuery, " (", q_width, " rows) and ", kKey, " (", kv_width,
                  " rows) do not split into heads of ", c.head_dim,
                  hints.head_dim > 0 ? ""
                                     : " (the usual width; pass the head width, or keep the config.json beside "
                                       "the weights)");
  c.n_heads = q_width / c.head_dim;
  c.n_kv_heads = kv_width / c.head_dim;
  std::vector<std::string> names;
  for (const auto& [name, shape] : shapes) names.push_back(name);
  c.n_layers = count_blocks(names, "layers.");
  WICK_CHECK_KIND(Data, c.n_heads % c.n_kv_heads == 0, "language model weights ", source, ": ", c.n_heads,
                  " query heads are not a multiple of ", c.n_kv_heads, " key / value heads (head width ", c.head_dim,
                  ")");
  validate(c);

  c.truncated = !shapes.count("norm.weight");
  const std::map<std::string, Shape> expected = parameter_shapes(c, c.n_layers, /*final_norm=*/!c.truncated);
  for (const auto& [name, shape] : expected) {
    auto it = shapes.find(name);
    WICK_CHECK_KIND(Data, it != shapes.end(), "language model weights ", source, ": tensor '", name,
                    "' is missing (expected shape ", shape, " for a ", family_name(c.family), " model of hidden ",
                    c.hidden_size, ", ", c.n_heads, " / ", c.n_kv_heads, " heads of ", c.head_dim, ", intermediate ",
                    c.intermediate_size, ", ", c.n_layers, " layers)");
    WICK_CHECK_KIND(Data, it->second == shape, "language model weights ", source, ": tensor '", name, "' has shape ",
                    it->second, " but a ", family_name(c.family), " model of hidden ", c.hidden_size, ", ", c.n_heads,
                    " / ", c.n_kv_heads, " heads of ", c.head_dim, ", intermediate ", c.intermediate_size,
                    " (read from embed_tokens and layer 0) requires ", shape);
  }
  for (const auto& [name, shape] : shapes)
    WICK_CHECK_KIND(Data, expected.count(name) || name == kLmHead || is_float8_companion(name),
                    "language model weights ", source, ": tensor '", name, "' ", shape, " is not a parameter of a ",
                    family_name(c.family), " text model (", family_evidence(c.family), ")");
  return c;
}

}  // namespace wick::llm
