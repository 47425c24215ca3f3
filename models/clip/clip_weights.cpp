#include "models/clip/clip_weights.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>

#include "runtime/error.h"

namespace wick::clip {
namespace {

// Model (transformers) layer <- OpenCLIP layer, inside text_model.encoder.layers.N / resblocks.N.
const std::vector<std::pair<std::string, std::string>> kOpenClipBlockLayers = {
    {"layer_norm1", "ln_1"}, {"layer_norm2", "ln_2"},   {"self_attn.out_proj", "attn.out_proj"},
    {"mlp.fc1", "mlp.c_fc"}, {"mlp.fc2", "mlp.c_proj"},
};
// Every layer of a block, for the transformers_flat renames.
const std::vector<std::string> kBlockLayers = {"layer_norm1",      "layer_norm2",      "self_attn.q_proj",
                                               "self_attn.k_proj", "self_attn.v_proj", "self_attn.out_proj",
                                               "mlp.fc1",          "mlp.fc2"};
const char* const kLayers = "text_model.encoder.layers.{N}.";
const char* const kTokenEmbedding = "text_model.embeddings.token_embedding.weight";
const char* const kPositionEmbedding = "text_model.embeddings.position_embedding.weight";

WeightFormat transformers_format(ClipKind kind) {
  std::vector<std::string> prefixes = {""};
  if (kind == ClipKind::L) {
    prefixes.insert(prefixes.end(), {"conditioner.embedders.0.transformer.", "text_encoders.clip_l.transformer.",
                                     "cond_stage_model.transformer."});
  } else {
    prefixes.push_back("text_encoders.clip_g.transformer.");
  }
  return WeightFormat{.name = "transformers",
                      .detect_keys = {"text_model.encoder.layers.0.mlp.fc1.weight"},
                      .prefixes = prefixes,
                      .rules = {},
                      .blocks = {},
                      .ignored = {"text_model.embeddings.position_ids", "logit_scale"}};
}

WeightFormat transformers_flat_format() {
  WeightFormat format{.name = "transformers_flat",
                      .detect_keys = {"encoder.layers.0.mlp.fc1.weight"},
                      .prefixes = {""},
                      .rules = {rename(kTokenEmbedding, "embeddings.token_embedding.weight"),
                                rename(kPositionEmbedding, "embeddings.position_embedding.weight"),
                                rename_layer("text_model.final_layer_norm", "final_layer_norm")},
                      .blocks = {},
                      .ignored = {"embeddings.position_ids", "logit_scale"}};
  BlockRules layers{.count_prefix = "encoder.layers.", .rules = {}};
  for (const std::string& layer : kBlockLayers)
    layers.rules.push_back(rename_layer(kLayers + layer, "encoder.layers.{N}." + layer));
  format.blocks = {layers};
  return format;
}

WeightFormat openclip_format(ClipKind kind) {
  std::vector<std::string> prefixes;
  if (kind == ClipKind::G)
    prefixes = {"conditioner.embedders.1.model.", "conditioner.embedders.0.model.", "cond_stage_model.model.", ""};
  else
    prefixes = {""};
  WeightFormat format{
      .name = "openclip",
      .detect_keys = {"transformer.resblocks.0.attn.in_proj_weight", "token_embedding.weight"},
      .prefixes = prefixes,
      .rules = {rename(kTokenEmbedding, "token_embedding.weight"), rename(kPositionEmbedding, "positional_embedding"),
                rename_layer("text_model.final_layer_norm", "ln_final"),
                // OpenCLIP: pooled @ P with P [width, projection]; a Linear keeps P^T.
                transposed("text_projection.weight", "text_projection")},
      .blocks = {},
      .ignored = {"logit_scale"}};
  BlockRules blocks{.count_prefix = "transformer.resblocks.", .rules = {}};
  const std::string resblock = "transformer.resblocks.{N}.";
  for (const auto& [model, openclip] : kOpenClipBlockLayers)
    blocks.rules.push_back(rename_layer(kLayers + model, resblock + openclip));
  // nn.MultiheadAttention's in_proj: rows [q; k; v], each width rows.
  const char* const projections[] = {"q_proj", "k_proj", "v_proj"};
  for (int64_t part = 0; part < 3; ++part) {
    const std::string target = std::string(kLayers) + "self_attn." + projections[part];
    blocks.rules.push_back(split_rows(target + ".weight", resblock + "attn.in_proj_weight", part, 3));
    blocks.rules.push_back(split_rows(target + ".bias", resblock + "attn.in_proj_bias", part, 3));
  }
  format.blocks = {blocks};
  return format;
}

std::vector<WeightFormat> make_formats(ClipKind kind) {
  return {transformers_format(kind), transformers_flat_format(), openclip_format(kind)};
}

const Shape& shape_of(const std::map<std::string, Shape>& shapes, const std::string& name, size_t rank,
                      const std::string& where) {
  auto it = shapes.find(name);
  WICK_CHECK_KIND(Data, it != shapes.end(), "CLIP text weights", where, ": '", name,
                  "' is missing, so the model's sizes are unknown (not a CLIP text encoder?)");
  WICK_CHECK_KIND(Data, it->second.size() == rank, "CLIP text weights", where, ": '", name, "' has shape ", it->second,
                  ", expected ", rank, " axes");
  return it->second;
}

int64_t json_int(const nlohmann::json& json, const char* key, const std::string& path, int64_t fallback) {
  if (!json.contains(key) || json[key].is_null()) return fallback;
  WICK_CHECK_KIND(Data, json[key].is_number_integer(), path, ": '", key, "' is not an integer");
  return json[key].get<int64_t>();
}

// "the config.json says X but the weights Y" for each size both give.
void check_against_config(const HfClipConfig& hf, const ClipTextConfig& c) {
  auto check = [&](int64_t said, int64_t found, const char* key, const char* tensor) {
    WICK_CHECK_KIND(Data, said == 0 || said == found, hf.path, " says ", key, " = ", said, " but the weights have ",
                    found, " (", tensor, ")");
  };
  check(hf.vocab_size, c.vocab_size, "vocab_size", "token_embedding rows");
  check(hf.hidden_size, c.hidden_size, "hidden_size", "token_embedding columns");
  check(hf.intermediate_size, c.intermediate_size, "intermediate_size", "layer 0's mlp.fc1 rows");
  check(hf.num_layers, c.num_layers, "num_hidden_layers", "text_model.encoder.layers.N");
  check(hf.max_position_embeddings, c.max_position_embeddings, "max_position_embeddings", "position_embedding rows");
}

}  // namespace

const char* kind_name(ClipKind kind) { return kind == ClipKind::L ? "CLIP-L" : "CLIP-G (bigG)"; }

std::optional<ClipKind> known_kind(const ClipTextConfig& c) {
  if (c.hidden_size == 768 && c.num_layers == 12) return ClipKind::L;
  if (c.hidden_size == 1280 && c.num_layers == 32) return ClipKind::G;
  return std::nullopt;
}

const std::vector<WeightFormat>& weight_formats(ClipKind kind) {
  static const std::vector<WeightFormat> l = make_formats(ClipKind::L), g = make_formats(ClipKind::G);
  return kind == ClipKind::L ? l : g;
}

DetectedFormat detect_weight_format(const WeightSource& source, ClipKind kind) {
  try {
    return detect_format(source, weight_formats(kind));
  } catch (const WickError& error) {
    if (error.kind() != ErrorKind::Data) throw;
    // The other kind's names (a prefix only it has, as SDXL's embedders.1 for bigG): say so.
    const ClipKind other = kind == ClipKind::L ? ClipKind::G : ClipKind::L;
    std::optional<DetectedFormat> found;
    try {
      found = detect_format(source, weight_formats(other));
    } catch (const WickError&) {
    }
    if (!found) throw;
    WICK_FAIL(Data, "weights: ", source.path(), " holds ", kind_name(other), " (format '", found->format.name,
              "' under the prefix '", found->prefix, "'), not ", kind_name(kind), ": load it as ", kind_name(other),
              "\n", error.what());
  }
}

std::optional<HfClipConfig> read_hf_config(const WeightSource& source) {
  const std::vector<std::string> files = source.files();
  if (files.empty()) return std::nullopt;
  const std::filesystem::path path = std::filesystem::path(files.front()).parent_path() / "config.json";
  std::ifstream in(path);
  if (!in) return std::nullopt;
  const std::string where = path.string();
  nlohmann::json json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  WICK_CHECK_KIND(Data, !json.is_discarded() && json.is_object(), where, " is not a JSON object");
  if (!json.contains("model_type") || json["model_type"] != "clip_text_model") return std::nullopt;
  HfClipConfig hf;
  hf.path = where;
  hf.vocab_size = json_int(json, "vocab_size", where, 0);
  hf.hidden_size = json_int(json, "hidden_size", where, 0);
  hf.intermediate_size = json_int(json, "intermediate_size", where, 0);
  hf.num_layers = json_int(json, "num_hidden_layers", where, 0);
  hf.num_heads = json_int(json, "num_attention_heads", where, 0);
  hf.max_position_embeddings = json_int(json, "max_position_embeddings", where, 0);
  hf.eos_token_id = json_int(json, "eos_token_id", where, hf.eos_token_id);
  if (json.contains("hidden_act")) {
    WICK_CHECK_KIND(Data, json["hidden_act"].is_string(), where, ": 'hidden_act' is not a string");
    hf.hidden_act = json["hidden_act"].get<std::string>();
  }
  if (json.contains("layer_norm_eps")) {
    WICK_CHECK_KIND(Data, json["layer_norm_eps"].is_number(), where, ": 'layer_norm_eps' is not a number");
    hf.layer_norm_eps = json["layer_norm_eps"].get<double>();
  }
  return hf;
}

ClipTextConfig config_from_shapes(const std::map<std::string, Shape>& shapes, int64_t num_heads,
                                  const std::string& source_name) {
  const std::string where = source_name.empty() ? "" : " " + source_name;
  ClipTextConfig c;
  const Shape& tokens = shape_of(shapes, kTokenEmbedding, 2, where);
  c.vocab_size = tokens[0];
  c.hidden_size = tokens[1];
  c.max_position_embeddings = shape_of(shapes, kPositionEmbedding, 2, where)[0];
  std::vector<std::string> names;
  for (const auto& [name, shape] : shapes) names.push_back(name);
  c.num_layers = count_blocks(names, "text_model.encoder.layers.");
  WICK_CHECK_KIND(Data, c.num_layers > 0, "CLIP text weights", where, ": no text_model.encoder.layers.N tensors");
  c.intermediate_size = shape_of(shapes, "text_model.encoder.layers.0.mlp.fc1.weight", 2, where)[0];
  if (shapes.count("text_projection.weight"))
    c.projection_dim = shape_of(shapes, "text_projection.weight", 2, where)[0];
  if (num_heads > 0) {
    c.num_heads = num_heads;
  } else {
    WICK_CHECK_KIND(Config, c.hidden_size % 64 == 0, "CLIP text weights", where, ": the width ", c.hidden_size,
                    " is not a multiple of 64, so the head count cannot be taken as width / 64 (CLIP-L and bigG "
                    "have 64-wide heads); give num_heads");
    c.num_heads = c.hidden_size / 64;
  }
  return c;
}

LoadedClipText load_clip_text(const std::string& path, const ClipLoadOptions& options) {
  const ClipKind kind = options.kind;
  WeightSource source = WeightSource::open(path, kind == ClipKind::L ? "text_encoder" : "text_encoder_2");
  DetectedFormat format = detect_weight_format(source, kind);
  std::optional<HfClipConfig> hf;
  if (format.prefix.empty()) hf = read_hf_config(source);

  ClipTextConfig c =
      config_from_shapes(mapped_shapes(source, format),
                         options.num_heads > 0 ? options.num_heads : (hf ? hf->num_heads : 0), source.path());
  if (hf) check_against_config(*hf, c);
  // Without a config.json the kind decides the activation: a real model of the other kind would
  // run with the wrong one.
  const std::optional<ClipKind> looks_like = known_kind(c);
  WICK_CHECK_KIND(Data, hf.has_value() || !options.activation.empty() || !looks_like || *looks_like == kind,
                  "CLIP text weights: ", source.path(), " holds a ", c.hidden_size, "-wide, ", c.num_layers,
                  "-layer encoder, which is ", kind_name(looks_like.value_or(kind)), ", but it was loaded as ",
                  kind_name(kind), "; load it as ", kind_name(looks_like.value_or(kind)),
                  " (or give the activation explicitly)");
  c.activation = !options.activation.empty() ? options.activation
                 : hf                        ? hf->hidden_act
                 : kind == ClipKind::L       ? "quick_gelu"
                                             : "gelu";
  if (hf) c.layer_norm_eps = hf->layer_norm_eps;
  if (options.pooling) {
    c.pooling = *options.pooling;
    c.eos_token_id = options.eos_token_id;
  } else if (hf) {
    c.pooling = hf->eos_token_id == 2 ? ClipPooling::Argmax : ClipPooling::FirstEos;
    c.eos_token_id = hf->eos_token_id;
  }
  WICK_CHECK_KIND(Data, !options.activation.empty() || c.activation == "quick_gelu" || c.activation == "gelu", hf->path,
                  ": hidden_act '", c.activation, "' is not one wick's CLIP has (quick_gelu, gelu)");
  c.dtype = options.dtype;
  c.device = options.device;
  c.initialize = false;

  LoadedClipText out;
  out.model = std::make_shared<ClipTextModel>(c);
  out.report = load_mapped(*out.model, source, format);
  out.format = std::move(format);
  out.source_path = source.path();
  out.config_json = hf ? hf->path : "";
  return out;
}

}  // namespace wick::clip
