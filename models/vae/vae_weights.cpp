#include "models/vae/vae_weights.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "runtime/error.h"

namespace wick::vae {
namespace {

const char* const kSides[] = {"encoder", "decoder"};
const char* const kResnetLayers[] = {"norm1", "conv1", "norm2", "conv2"};
// LDM attention projection <- diffusers Linear.
const std::pair<const char*, const char*> kAttentionProjections[] = {
    {"q", "to_q"}, {"k", "to_k"}, {"v", "to_v"}, {"proj_out", "to_out.0"}};
// FLUX.2's latent BatchNorm: its statistics (the model's), and the step counter training left beside them.
const char* const kBatchNormMean = "bn.running_mean";
const char* const kBatchNormVar = "bn.running_var";
const char* const kBatchNormSteps = "bn.num_batches_tracked";

WeightFormat make_ldm_format() {
  WeightFormat format{.name = "ldm",
                      .detect_keys = {"encoder.conv_in.weight", "encoder.down.0.block.0.conv1.weight"},
                      .prefixes = {"", "first_stage_model.", "vae."},
                      .rules = {},
                      .blocks = {},
                      .ignored = {kBatchNormSteps}};
  // FLUX.2's files (BFL's, ComfyUI's) keep the quant convs inside the encoder and the decoder.
  format.rules.push_back(rename_layer("quant_conv", "encoder.quant_conv"));
  format.rules.push_back(rename_layer("post_quant_conv", "decoder.post_quant_conv"));
  // Some conversions store the attention projections as Linear weights [C, C]; the model's are 1x1 convs.
  for (const char* side : kSides)
    for (const auto& [ldm, diffusers] : kAttentionProjections) {
      const std::string name = std::string(side) + ".mid.attn_1." + ldm + ".weight";
      format.rules.push_back(reshaped(name, name, 4));
    }
  return format;
}

// A ResBlock's layers: model `target` <- diffusers `source` (conv_shortcut -> nin_shortcut).
void add_resnet(std::vector<KeyRule>& rules, const std::string& target, const std::string& source) {
  for (const char* layer : kResnetLayers) rules.push_back(rename_layer(target + "." + layer, source + "." + layer));
  rules.push_back(rename_layer(target + ".nin_shortcut", source + ".conv_shortcut"));
}

const Shape& shape_of(const std::map<std::string, Shape>& shapes, const std::string& name, size_t rank,
                      const std::string& where) {
  auto it = shapes.find(name);
  WICK_CHECK_KIND(Data, it != shapes.end(), "VAE weights", where, ": '", name,
                  "' is missing, so the model's sizes are unknown (not an AutoencoderKL?)");
  WICK_CHECK_KIND(Data, it->second.size() == rank, "VAE weights", where, ": '", name, "' has shape ", it->second,
                  ", expected ", rank, " axes");
  return it->second;
}

std::optional<int64_t> json_int(const nlohmann::json& json, const char* key, const std::string& path) {
  if (!json.contains(key) || json[key].is_null()) return std::nullopt;
  WICK_CHECK_KIND(Data, json[key].is_number_integer(), path, ": '", key, "' is not an integer");
  return json[key].get<int64_t>();
}
std::optional<double> json_number(const nlohmann::json& json, const char* key, const std::string& path) {
  if (!json.contains(key) || json[key].is_null()) return std::nullopt;
  WICK_CHECK_KIND(Data, json[key].is_number(), path, ": '", key, "' is not a number");
  return json[key].get<double>();
}
std::optional<bool> json_bool(const nlohmann::json& json, const char* key, const std::string& path) {
  if (!json.contains(key) || json[key].is_null()) return std::nullopt;
  WICK_CHECK_KIND(Data, json[key].is_boolean(), path, ": '", key, "' is not true or false");
  return json[key].get<bool>();
}

std::optional<std::vector<int64_t>> json_int_list(const nlohmann::json& json, const char* key,
                                                  const std::string& path) {
  if (!json.contains(key) || json[key].is_null()) return std::nullopt;
  const nlohmann::json& list = json[key];
  WICK_CHECK_KIND(Data, list.is_array(), path, ": '", key, "' is not a list");
  std::vector<int64_t> values;
  for (const nlohmann::json& v : list) {
    WICK_CHECK_KIND(Data, v.is_number_integer(), path, ": '", key, "' holds a non-integer");
    values.push_back(v.get<int64_t>());
  }
  return values;
}

std::string list_text(const std::vector<int64_t>& values) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < values.size(); ++i) out << (i ? ", " : "") << values[i];
  out << "]";
  return out.str();
}

// "config.json says X = a but the weights have b" for every size both give.
void check_against_config(const HfVaeConfig& hf, const VaeConfig& c) {
  auto check = [&](const auto& said, const auto& found, const char* key, const char* where) {
    if (!said || *said == found) return;
    std::ostringstream said_text, found_text;
    if constexpr (std::is_same_v<std::decay_t<decltype(found)>, std::vector<int64_t>>) {
      said_text << list_text(*said);
      found_text << list_text(found);
    } else {
      said_text << std::boolalpha << *said;
      found_text << std::boolalpha << found;
    }
    WICK_FAIL(Data, hf.path, " says ", key, " = ", said_text.str(), " but the weights have ", found_text.str(), " (",
              where, ")");
  };
  check(hf.latent_channels, c.z_channels, "latent_channels", "decoder.conv_in input channels");
  check(hf.block_out_channels, c.block_channels, "block_out_channels", "each level's first conv1");
  check(hf.layers_per_block, c.encoder_blocks, "layers_per_block", "ResBlocks per encoder level");
  check(hf.layers_per_block ? std::optional<int64_t>(*hf.layers_per_block + 1) : std::nullopt, c.decoder_blocks,
        "layers_per_block + 1", "ResBlocks per decoder level");
  check(hf.in_channels, c.in_channels, "in_channels", "encoder.conv_in input channels");
  check(hf.out_channels, c.out_channels, "out_channels", "decoder.conv_out output channels");
  check(hf.use_quant_conv, c.quant_conv, "use_quant_conv", "quant_conv present");
  check(hf.use_post_quant_conv, c.post_quant_conv, "use_post_quant_conv", "post_quant_conv present");
  check(hf.mid_block_add_attention, c.mid_attention, "mid_block_add_attention", "mid-block attention present");
  if (hf.patch_size) {
    const std::vector<int64_t> square = {c.latent_patch, c.latent_patch};
    check(hf.patch_size, square, "patch_size", "bn.running_mean's length / latent channels, a square");
  }
  WICK_CHECK_KIND(Data, !hf.decoder_block_out_channels || *hf.decoder_block_out_channels == c.block_channels, hf.path,
                  " says decoder_block_out_channels = ",
                  hf.decoder_block_out_channels ? list_text(*hf.decoder_block_out_channels) : "",
                  ": a decoder with other channels than the encoder's ", list_text(c.block_channels),
                  " is not supported");
}

// The latent BatchNorm's patch from its statistics' length (patch² · z_channels); 0 when it has none.
int64_t latent_patch_from_shapes(const std::map<std::string, Shape>& shapes, int64_t z_channels,
                                 const std::string& where) {
  const bool has_mean = shapes.count(kBatchNormMean) != 0, has_var = shapes.count(kBatchNormVar) != 0;
  if (!has_mean && !has_var) return 0;
  WICK_CHECK_KIND(Data, has_mean && has_var, "VAE weights", where, ": '", has_mean ? kBatchNormMean : kBatchNormVar,
                  "' is present but '", has_mean ? kBatchNormVar : kBatchNormMean,
                  "' is missing (FLUX.2's latent BatchNorm needs both running statistics)");
  const Shape& mean = shape_of(shapes, kBatchNormMean, 1, where);
  const Shape& var = shape_of(shapes, kBatchNormVar, 1, where);
  WICK_CHECK_KIND(Data, mean == var, "VAE weights", where, ": '", kBatchNormMean, "' has shape ", mean, " but '",
                  kBatchNormVar, "' has ", var);
  WICK_CHECK_KIND(Data, z_channels > 0, "VAE weights", where, ": ", z_channels, " latent channels");
  int64_t patch = 1;
  while (patch * patch * z_channels < mean[0]) ++patch;
  WICK_CHECK_KIND(Data, patch * patch * z_channels == mean[0], "VAE weights", where, ": '", kBatchNormMean, "' has ",
                  mean[0], " channels, which are not a square patch of the ", z_channels,
                  " latent channels (FLUX.2: 4 x 32 = 128)");
  return patch;
}

}  // namespace

const WeightFormat& ldm_format() {
  static const WeightFormat format = make_ldm_format();
  return format;
}

WeightFormat diffusers_format(int64_t n_levels) {
  WeightFormat format{.name = "diffusers",
                      .detect_keys = {"encoder.conv_in.weight", "encoder.down_blocks.0.resnets.0.conv1.weight"},
                      .prefixes = {"", "vae."},
                      .rules = {},
                      .blocks = {},
                      .ignored = {kBatchNormSteps}};
  std::vector<KeyRule>& rules = format.rules;
  for (const std::string side : kSides) {
    rules.push_back(rename_layer(side + ".norm_out", side + ".conv_norm_out"));
    const std::string mid = side + ".mid.", source = side + ".mid_block.";
    for (const char* layer : kResnetLayers) {
      rules.push_back(rename_layer(mid + "block_1." + layer, source + "resnets.0." + layer));
      rules.push_back(rename_layer(mid + "block_2." + layer, source + "resnets.1." + layer));
    }
    rules.push_back(rename_layer(mid + "attn_1.norm", source + "attentions.0.group_norm"));
    for (const auto& [ldm, diffusers] : kAttentionProjections) {  // Linear [C, C] -> 1x1 conv [C, C, 1, 1]
      const std::string target = mid + "attn_1." + ldm, from = source + "attentions.0." + diffusers;
      rules.push_back(reshaped(target + ".weight", from + ".weight", 4));
      rules.push_back(rename(target + ".bias", from + ".bias"));
    }
  }
  for (int64_t i = 0; i < n_levels; ++i) {
    const std::string down = "encoder.down." + std::to_string(i),
                      down_blocks = "encoder.down_blocks." + std::to_string(i);
    // diffusers counts the decoder's levels in the order they run: up_blocks.i = LDM up.(n - 1 - i).
    const std::string up = "decoder.up." + std::to_string(n_levels - 1 - i),
                      up_blocks = "decoder.up_blocks." + std::to_string(i);
    rules.push_back(rename_layer(down + ".downsample.conv", down_blocks + ".downsamplers.0.conv"));
    rules.push_back(rename_layer(up + ".upsample.conv", up_blocks + ".upsamplers.0.conv"));
    BlockRules encoder_blocks{.count_prefix = down_blocks + ".resnets.", .rules = {}};
    add_resnet(encoder_blocks.rules, down + ".block.{N}", down_blocks + ".resnets.{N}");
    BlockRules decoder_blocks{.count_prefix = up_blocks + ".resnets.", .rules = {}};
    add_resnet(decoder_blocks.rules, up + ".block.{N}", up_blocks + ".resnets.{N}");
    format.blocks.push_back(std::move(encoder_blocks));
    format.blocks.push_back(std::move(decoder_blocks));
  }
  return format;
}

DetectedFormat detect_vae_format(const WeightSource& source) {
  DetectedFormat found = detect_format(source, {ldm_format(), diffusers_format(0)});
  if (found.format.name != "diffusers") return found;
  std::vector<std::string> names;
  for (const std::string& name : source.names())
    if (name.rfind(found.prefix, 0) == 0) names.push_back(name.substr(found.prefix.size()));
  return DetectedFormat{.format = diffusers_format(count_blocks(names, "encoder.down_blocks.")),
                        .prefix = found.prefix};
}

VaeConfig config_from_shapes(const std::map<std::string, Shape>& shapes, const std::string& source_name) {
  const std::string where = source_name.empty() ? "" : " " + source_name;
  std::vector<std::string> names;
  for (const auto& [name, shape] : shapes) names.push_back(name);
  VaeConfig c;
  const Shape& conv_in = shape_of(shapes, "encoder.conv_in.weight", 4, where);
  c.in_channels = conv_in[1];
  const int64_t n_levels = count_blocks(names, "encoder.down.");
  WICK_CHECK_KIND(Data, n_levels > 0 && n_levels <= 16, "VAE weights", where, ": ", n_levels,
                  " encoder.down.N levels (expected 1 to 16)");
  WICK_CHECK_KIND(Data, count_blocks(names, "decoder.up.") == n_levels, "VAE weights", where, ": ", n_levels,
                  " encoder levels (encoder.down.N) but ", count_blocks(names, "decoder.up."),
                  " decoder levels (decoder.up.N)");
  c.block_channels.clear();
  for (int64_t i = 0; i < n_levels; ++i)
    c.block_channels.push_back(
        shape_of(shapes, "encoder.down." + std::to_string(i) + ".block.0.conv1.weight", 4, where)[0]);
  WICK_CHECK_KIND(Data, conv_in[0] == c.block_channels[0], "VAE weights", where, ": encoder.conv_in makes ", conv_in[0],
                  " channels but level 0 has ", c.block_channels[0]);
  c.encoder_blocks = count_blocks(names, "encoder.down.0.block.");
  c.decoder_blocks = count_blocks(names, "decoder.up.0.block.");
  WICK_CHECK_KIND(Data, c.decoder_blocks > 0, "VAE weights", where, ": no decoder.up.0.block.N tensors");
  c.z_channels = shape_of(shapes, "decoder.conv_in.weight", 4, where)[1];
  const int64_t moments = shape_of(shapes, "encoder.conv_out.weight", 4, where)[0];
  WICK_CHECK_KIND(Data, moments == 2 * c.z_channels, "VAE weights", where, ": encoder.conv_out makes ", moments,
                  " channels, but the decoder takes ", c.z_channels, " latent channels (expected twice as many: mean ",
                  "and logvar)");
  c.out_channels = shape_of(shapes, "decoder.conv_out.weight", 4, where)[0];
  c.quant_conv = shapes.count("quant_conv.weight") != 0;
  c.post_quant_conv = shapes.count("post_quant_conv.weight") != 0;
  c.mid_attention = shapes.count("encoder.mid.attn_1.q.weight") != 0;
  c.latent_patch = latent_patch_from_shapes(shapes, c.z_channels, where);
  return c;
}

std::optional<HfVaeConfig> read_hf_config(const WeightSource& source) {
  const std::vector<std::string> files = source.files();
  if (files.empty()) return std::nullopt;
  const std::filesystem::path path = std::filesystem::path(files.front()).parent_path() / "config.json";
  std::ifstream in(path);
  if (!in) return std::nullopt;
  const std::string where = path.string();
  nlohmann::json json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  WICK_CHECK_KIND(Data, !json.is_discarded() && json.is_object(), where, " is not a JSON object");
  if (!json.contains("_class_name") || !json["_class_name"].is_string()) return std::nullopt;
  const std::string class_name = json["_class_name"].get<std::string>();
  if (class_name != "AutoencoderKL" && class_name != "AutoencoderKLFlux2") return std::nullopt;
  HfVaeConfig hf;
  hf.path = where;
  hf.class_name = class_name;
  hf.scaling_factor = json_number(json, "scaling_factor", where);
  // AutoencoderKLFlux2 has no scaling factor: its pipeline normalizes by the BatchNorm alone.
  if (class_name == "AutoencoderKLFlux2" && !hf.scaling_factor) hf.scaling_factor = 1.0;
  hf.batch_norm_eps = json_number(json, "batch_norm_eps", where);
  hf.shift_factor = json_number(json, "shift_factor", where).value_or(0.0);
  hf.norm_num_groups = json_int(json, "norm_num_groups", where);
  hf.latent_channels = json_int(json, "latent_channels", where);
  hf.layers_per_block = json_int(json, "layers_per_block", where);
  hf.in_channels = json_int(json, "in_channels", where);
  hf.out_channels = json_int(json, "out_channels", where);
  hf.use_quant_conv = json_bool(json, "use_quant_conv", where);
  hf.use_post_quant_conv = json_bool(json, "use_post_quant_conv", where);
  hf.mid_block_add_attention = json_bool(json, "mid_block_add_attention", where);
  hf.block_out_channels = json_int_list(json, "block_out_channels", where);
  hf.decoder_block_out_channels = json_int_list(json, "decoder_block_out_channels", where);
  hf.patch_size = json_int_list(json, "patch_size", where);
  return hf;
}

namespace {

// `path`, or the vae/ subfolder of a pipeline folder.
WeightSource open_vae_source(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path pipeline_vae = std::filesystem::path(path) / "vae";
  return WeightSource::open(std::filesystem::is_directory(pipeline_vae, ec) ? pipeline_vae.string() : path, "vae");
}

// The weights at `path` and what their headers say: format, config.json, sizes and group count.
struct OpenedVae {
  WeightSource source;
  DetectedFormat format;
  std::optional<HfVaeConfig> hf;
  VaeConfig config;
};

OpenedVae open_vae(const std::string& path, int64_t norm_groups) {
  WeightSource source = open_vae_source(path);
  DetectedFormat format = detect_vae_format(source);
  std::optional<HfVaeConfig> hf;
  if (format.prefix.empty()) hf = read_hf_config(source);
  VaeConfig c = config_from_shapes(mapped_shapes(source, format), source.path());
  if (hf) check_against_config(*hf, c);
  WICK_CHECK_KIND(Config, norm_groups >= 0, "VAE: norm_groups must be >= 0 (0: config.json's or 32), got ",
                  norm_groups);
  c.norm_groups = norm_groups > 0 ? norm_groups : hf && hf->norm_num_groups.has_value() ? *hf->norm_num_groups : 32;
  if (hf && hf->batch_norm_eps) c.batch_norm_eps = *hf->batch_norm_eps;
  return {.source = std::move(source), .format = std::move(format), .hf = std::move(hf), .config = c};
}

// Sets vae.config.normalization, each of scaling and shift from the options, else config.json, else the model's,
// else (a VAE with a latent BatchNorm, FLUX.2's, which normalizes its latents by itself) none; returns where they
// came from.
std::string resolve_normalization(OpenedVae& vae, const VaeLoadOptions& options) {
  const std::optional<ModelNormalization>& model = options.normalization;
  const std::string model_source = model ? "the " + model->model + " model's" : "";
  auto pick = [&](const std::optional<double>& option, const std::optional<double>& from_json, double from_model,
                  double none, const char* what, double& value) -> std::string {
    if (option) {
      value = *option;
      return "options";
    }
    if (from_json) {
      value = *from_json;
      return "config.json";
    }
    if (!model && vae.config.latent_patch > 0) {
      value = none;
      return "none (the latent BatchNorm normalizes)";
    }
    WICK_CHECK_KIND(Config, model.has_value(), "VAE weights ", vae.source.path(), ": the ", what,
                    " is unknown (no config.json, and a ", vae.config.z_channels,
                    "-channel VAE in this format could belong to several models): give the model it is for, or ", what);
    value = from_model;
    return model_source;
  };
  const std::optional<HfVaeConfig>& hf = vae.hf;
  LatentNormalization& n = vae.config.normalization;
  const LatentNormalization preset = model ? model->normalization : LatentNormalization{};
  const std::string scaling_source = pick(options.scaling_factor, hf ? hf->scaling_factor : std::nullopt,
                                          preset.scaling_factor, 1.0, "scaling_factor", n.scaling_factor);
  const std::string shift_source =
      pick(options.shift_factor, hf ? std::optional<double>(hf->shift_factor) : std::nullopt, preset.shift_factor, 0.0,
           "shift_factor", n.shift_factor);
  return scaling_source == shift_source
             ? scaling_source
             : "scaling_factor from " + scaling_source + ", shift_factor from " + shift_source;
}

}  // namespace

VaeHeader read_vae_header(const std::string& path, int64_t norm_groups) {
  OpenedVae vae = open_vae(path, norm_groups);
  validate(vae.config);
  return {.config = vae.config, .source_path = vae.source.path(), .normalization_source = ""};
}

VaeHeader read_vae_header(const std::string& path, const VaeLoadOptions& options) {
  OpenedVae vae = open_vae(path, options.norm_groups);
  const std::string normalization_source = resolve_normalization(vae, options);
  validate(vae.config);
  return {.config = vae.config, .source_path = vae.source.path(), .normalization_source = normalization_source};
}

LatentBatchNorm read_latent_batch_norm(const std::string& path) {
  const OpenedVae vae = open_vae(path, 0);
  WICK_CHECK_KIND(Data, vae.config.latent_patch > 0, vae.source.path(), ": the VAE has no latent BatchNorm ('",
                  kBatchNormMean, "', '", kBatchNormVar, "'), so it is not FLUX.2's (its ", vae.config.z_channels,
                  " latent channels are not patchified and normalized)");
  LatentBatchNorm out{
      .patch = vae.config.latent_patch, .eps = vae.config.batch_norm_eps, .running_mean = {}, .running_var = {}};
  auto read = [&](const char* name, bool variance) {
    const std::string stored = vae.format.prefix + name;
    std::vector<double> values = vae.source.get(stored).to(DType::F64).to_vector<double>();
    for (size_t c = 0; c < values.size(); ++c)
      WICK_CHECK_KIND(Data, std::isfinite(values[c]) && (!variance || values[c] + out.eps > 0), vae.source.path(),
                      ": '", stored, "' is ", values[c], " at channel ", c,
                      variance ? " (a variance plus eps must be positive)" : "");
    return values;
  };
  out.running_mean = read(kBatchNormMean, false);
  out.running_var = read(kBatchNormVar, true);
  return out;
}

LoadedVae load_vae(const std::string& path, const VaeLoadOptions& options) {
  OpenedVae vae = open_vae(path, options.norm_groups);
  LoadedVae out;
  out.normalization_source = resolve_normalization(vae, options);
  VaeConfig c = vae.config;
  c.dtype = options.dtype;
  c.device = options.device;
  c.attention_query_chunk = options.attention_query_chunk;
  c.initialize = false;

  out.model = std::make_shared<AutoencoderKL>(c);
  out.report = load_mapped(*out.model, vae.source, vae.format);
  out.format = std::move(vae.format);
  out.source_path = vae.source.path();
  out.config_json = vae.hf ? vae.hf->path : "";
  return out;
}

}  // namespace wick::vae
