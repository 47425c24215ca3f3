#include "models/vae/wan_vae_weights.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>

#include "runtime/error.h"
#include "runtime/shape.h"

namespace wick::vae {
namespace {

const char* const kSides[] = {"encoder", "decoder"};
const std::string kDiffusersClasses[] = {"AutoencoderKLQwenImage", "AutoencoderKLWan"};

// A residual block's layers: Wan `target` <- diffusers `source`.
void add_residual(std::vector<KeyRule>& rules, const std::string& target, const std::string& source) {
  rules.push_back(rename(target + ".residual.0.gamma", source + ".norm1.gamma"));
  rules.push_back(rename_layer(target + ".residual.2", source + ".conv1"));
  rules.push_back(rename(target + ".residual.3.gamma", source + ".norm2.gamma"));
  rules.push_back(rename_layer(target + ".residual.6", source + ".conv2"));
  rules.push_back(rename_layer(target + ".shortcut", source + ".conv_shortcut"));
}

void add_resample(std::vector<KeyRule>& rules, const std::string& target, const std::string& source) {
  rules.push_back(rename_layer(target + ".resample.1", source + ".resample.1"));
  rules.push_back(rename_layer(target + ".time_conv", source + ".time_conv"));
}

WeightFormat make_wan_format() {
  return WeightFormat{.name = "wan",
                      .detect_keys = {"encoder.conv1.weight", "encoder.downsamples.0.residual.0.gamma"},
                      .prefixes = {"", "first_stage_model.", "vae."},
                      .rules = {},
                      .blocks = {},
                      .ignored = {}};
}


// `path`, or the vae/ subfolder of a pipeline folder.
WeightSource open_source(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path pipeline_vae = std::filesystem::path(path) / "vae";
  return WeightSource::open(std::filesystem::is_directory(pipeline_vae, ec) ? pipeline_vae.string() : path, "vae");
}

// What config.json beside the weights says, when there is one.
struct WanHfConfig {
  std::string path;
  nlohmann::json json;
};

std::optional<WanHfConfig> read_config_json(const WeightSource& source) {
  const std::vector<std::string> files = source.files();
  if (files.empty()) return std::nullopt;
  const std::filesystem::path path = std::filesystem::path(files.front()).parent_path() / "config.json";
  std::ifstream in(path);
  if (!in) return std::nullopt;
  WanHfConfig hf{.path = path.string(), .json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false)};
  WICK_CHECK_KIND(Data, !hf.json.is_discarded() && hf.json.is_object(), hf.path, " is not a JSON object");
  const std::string name = hf.json.value("_class_name", std::string());
  bool known = false;
  for (const std::string& k : kDiffusersClasses) known = known || name == k;
  WICK_CHECK_KIND(Config, known, hf.path, " is for ", name.empty() ? "a model without _class_name" : name,
                  ", not a Wan 2.1 / Qwen-Image VAE (AutoencoderKLQwenImage or AutoencoderKLWan)");
  return hf;
}

std::vector<double> json_numbers(const nlohmann::json& json, const char* key, const std::string& path) {
  const nlohmann::json& list = json[key];
  WICK_CHECK_KIND(Data, list.is_array(), path, ": '", key, "' is not a list");
  std::vector<double> out;
  for (const nlohmann::json& v : list) {
    WICK_CHECK_KIND(Data, v.is_number(), path, ": '", key, "' holds a non-number");
    out.push_back(v.get<double>());
  }
  return out;
}

// "config.json says X = a but the weights have b" for every size both give.
void check_against_config(const WanHfConfig& hf, const WanVaeConfig& c) {
  auto check_int = [&](const char* key, int64_t found) {
    if (!hf.json.contains(key) || hf.json[key].is_null()) return;
    WICK_CHECK_KIND(Data, hf.json[key].is_number_integer() && hf.json[key].get<int64_t>() == found, hf.path, " says ",
                    key, " = ", hf.json[key].dump(), " but the weights have ", found);
  };
  check_int("base_dim", c.base_dim);
  check_int("z_dim", c.z_dim);
  check_int("num_res_blocks", c.num_res_blocks);
  check_int("input_channels", c.in_channels);
  if (hf.json.contains("dim_mult") && hf.json["dim_mult"].is_array()) {
    std::vector<int64_t> said;
    for (const nlohmann::json& v : hf.json["dim_mult"]) said.push_back(v.is_number_integer() ? v.get<int64_t>() : -1);
    WICK_CHECK_KIND(Data, said == c.dim_mult, hf.path, " says dim_mult = ", shape_string(said), " but the weights have ",
                    shape_string(c.dim_mult));
  }
  if (hf.json.contains("temperal_downsample") && hf.json["temperal_downsample"].is_array()) {
    std::vector<bool> said;
    for (const nlohmann::json& v : hf.json["temperal_downsample"]) said.push_back(v.is_boolean() && v.get<bool>());
    WICK_CHECK_KIND(Data, said == c.temporal_downsample, hf.path,
                    " says temperal_downsample differently from the weights' time_conv layers");
  }
}

// Tensor shapes by name, for the sizes; `where` (" <path>" or "") goes into the messages.
struct ShapeReader {
  const std::map<std::string, Shape>& shapes;
  std::string where;

  bool has(const std::string& name) const { return shapes.count(name) != 0; }
  const Shape& get(const std::string& name, size_t rank) const {
    auto it = shapes.find(name);
    WICK_CHECK_KIND(Data, it != shapes.end(), "Wan VAE weights", where, ": '", name,
                    "' is missing, so the model's sizes are unknown");
    WICK_CHECK_KIND(Data, it->second.size() == rank, "Wan VAE weights", where, ": '", name, "' has shape ", it->second,
                    ", expected ", rank, " axes");
    return it->second;
  }
};

// dim_mult, num_res_blocks and temporal_downsample from the encoder's flat list: residual blocks, and a
// resample closing each level but the last (with a time_conv where the level downsamples time).
void read_encoder_levels(const ShapeReader& shapes, WanVaeConfig& c) {
  std::vector<std::string> names;
  for (const auto& [name, shape] : shapes.shapes) names.push_back(name);
  c.dim_mult.clear();
  c.temporal_downsample.clear();
  std::vector<int64_t> blocks_per_level;
  int64_t in_level = 0, level_channels = 0;
  auto close_level = [&] {
    WICK_CHECK_KIND(Data, in_level > 0 && level_channels % c.base_dim == 0, "Wan VAE weights", shapes.where,
                    ": encoder level ", blocks_per_level.size(), " has ", in_level, " residual blocks and ",
                    level_channels, " channels (expected at least one block, a multiple of ", c.base_dim, ")");
    c.dim_mult.push_back(level_channels / c.base_dim);
    blocks_per_level.push_back(std::exchange(in_level, 0));
  };
  for (int64_t i = 0; i < count_blocks(names, "encoder.downsamples."); ++i) {
    const std::string layer = "encoder.downsamples." + std::to_string(i);
    if (shapes.has(layer + ".residual.2.weight")) {
      level_channels = shapes.get(layer + ".residual.2.weight", 5)[0];
      ++in_level;
    } else {
      WICK_CHECK_KIND(Data, shapes.has(layer + ".resample.1.weight"), "Wan VAE weights", shapes.where, ": ", layer,
                      " is neither a residual block (residual.2.weight) nor a resample (resample.1.weight)");
      close_level();
      c.temporal_downsample.push_back(shapes.has(layer + ".time_conv.weight"));
    }
  }
  close_level();
  for (int64_t blocks : blocks_per_level)
    WICK_CHECK_KIND(Data, blocks == blocks_per_level.front(), "Wan VAE weights", shapes.where,
                    ": encoder levels have different residual block counts (", blocks, " and ",
                    blocks_per_level.front(), ")");
  c.num_res_blocks = blocks_per_level.front();
}

// The normalization (options, else config.json, else Wan 2.1's for 16 channels) and where it came from.
std::string pick_normalization(const WanVaeLoadOptions& options, const std::optional<WanHfConfig>& hf,
                               const std::string& source_path, WanVaeConfig& c) {
  if (options.normalization) {
    c.normalization = *options.normalization;
    return "options";
  }
  if (hf && hf->json.contains("latents_mean") && hf->json.contains("latents_std")) {
    c.normalization = {.mean = json_numbers(hf->json, "latents_mean", hf->path),
                       .std = json_numbers(hf->json, "latents_std", hf->path)};
    return "config.json";
  }
  WICK_CHECK_KIND(Config, c.z_dim == 16, "Wan VAE weights ", source_path, ": ", c.z_dim,
                  " latent channels and no config.json with latents_mean / latents_std: give the normalization");
  c.normalization = wan21_latent_normalization();
  return "Wan 2.1's (Qwen-Image's) defaults";
}

// The weights at `path` and what their headers say: layout, config.json, sizes and normalization.
struct OpenedWanVae {
  WeightSource source;
  DetectedFormat format;
  std::optional<WanHfConfig> hf;
  WanVaeConfig config;
  std::string normalization_source;
};

OpenedWanVae open_wan_vae(const std::string& path, const WanVaeLoadOptions& options);

}  // namespace

const WeightFormat& wan_vae_format() {
  static const WeightFormat format = make_wan_format();
  return format;
}

WeightFormat wan_vae_diffusers_format(int64_t n_levels, int64_t decoder_blocks) {
  WeightFormat format{.name = "diffusers",
                      .detect_keys = {"encoder.conv_in.weight", "encoder.down_blocks.0.norm1.gamma"},
                      .prefixes = {"", "vae."},
                      .rules = {},
                      .blocks = {},
                      .ignored = {}};
  std::vector<KeyRule>& rules = format.rules;
  rules.push_back(rename_layer("conv1", "quant_conv"));
  rules.push_back(rename_layer("conv2", "post_quant_conv"));
  for (const std::string side : kSides) {
    rules.push_back(rename_layer(side + ".conv1", side + ".conv_in"));
    rules.push_back(rename(side + ".head.0.gamma", side + ".norm_out.gamma"));
    rules.push_back(rename_layer(side + ".head.2", side + ".conv_out"));
    add_residual(rules, side + ".middle.0", side + ".mid_block.resnets.0");
    add_residual(rules, side + ".middle.2", side + ".mid_block.resnets.1");
    const std::string attention = side + ".middle.1", from = side + ".mid_block.attentions.0";
    rules.push_back(rename(attention + ".norm.gamma", from + ".norm.gamma"));
    rules.push_back(rename_layer(attention + ".to_qkv", from + ".to_qkv"));
    rules.push_back(rename_layer(attention + ".proj", from + ".proj"));
  }
  // The encoder's list is flat in both layouts: the same index.
  BlockRules encoder{.count_prefix = "encoder.down_blocks.", .rules = {}};
  add_residual(encoder.rules, "encoder.downsamples.{N}", "encoder.down_blocks.{N}");
  add_resample(encoder.rules, "encoder.downsamples.{N}", "encoder.down_blocks.{N}");
  format.blocks.push_back(std::move(encoder));
  // The decoder's is flat in Wan's: each level's residual blocks, then its upsampler.
  const int64_t stride = decoder_blocks + 1;
  for (int64_t i = 0; i < n_levels; ++i) {
    const std::string level = "decoder.up_blocks." + std::to_string(i);
    for (int64_t j = 0; j < decoder_blocks; ++j)
      add_residual(rules, "decoder.upsamples." + std::to_string(i * stride + j),
                   level + ".resnets." + std::to_string(j));
    add_resample(rules, "decoder.upsamples." + std::to_string(i * stride + decoder_blocks), level + ".upsamplers.0");
  }
  return format;
}

DetectedFormat detect_wan_vae_format(const WeightSource& source) {
  DetectedFormat found;
  try {
    found = detect_format(source, {wan_vae_format(), wan_vae_diffusers_format(0, 0)});
  } catch (const WickError& error) {
    if (error.kind() != ErrorKind::Data) throw;
    std::string hint;
    for (const std::string& name : source.names())
      if (name.find("encoder.down.0.block.0.conv1.weight") != std::string::npos ||
          name.find("encoder.down_blocks.0.resnets.0.conv1.weight") != std::string::npos)
        hint = " (its names are an AutoencoderKL's: the SDXL / SD3 / Flux VAE, not the Wan one)";
    WICK_FAIL(Config, source.path(), " is not a Wan 2.1 / Qwen-Image VAE", hint, ": ", error.what());
  }
  if (found.format.name != "diffusers") return found;
  std::vector<std::string> names;
  for (const std::string& name : source.names())
    if (name.rfind(found.prefix, 0) == 0) names.push_back(name.substr(found.prefix.size()));
  return DetectedFormat{.format = wan_vae_diffusers_format(count_blocks(names, "decoder.up_blocks."),
                                                           count_blocks(names, "decoder.up_blocks.0.resnets.")),
                        .prefix = found.prefix};
}

WanVaeConfig wan_vae_config_from_shapes(const std::map<std::string, Shape>& shapes, const std::string& source_name) {
  const ShapeReader shapes_of{.shapes = shapes, .where = source_name.empty() ? "" : " " + source_name};
  WanVaeConfig c;
  const Shape& conv_in = shapes_of.get("encoder.conv1.weight", 5);
  c.in_channels = conv_in[1];
  c.base_dim = conv_in[0];
  c.z_dim = shapes_of.get("decoder.conv1.weight", 5)[1];
  const int64_t moments = shapes_of.get("encoder.head.2.weight", 5)[0];
  WICK_CHECK_KIND(Data, moments == 2 * c.z_dim, "Wan VAE weights", shapes_of.where, ": encoder.head.2 makes ", moments,
                  " channels, but the decoder takes ", c.z_dim, " latent channels (expected twice as many)");
  read_encoder_levels(shapes_of, c);
  return c;
}

namespace {

OpenedWanVae open_wan_vae(const std::string& path, const WanVaeLoadOptions& options) {
  OpenedWanVae vae{
      .source = open_source(path), .format = {}, .hf = std::nullopt, .config = {}, .normalization_source = ""};
  vae.format = detect_wan_vae_format(vae.source);
  if (vae.format.prefix.empty()) vae.hf = read_config_json(vae.source);
  vae.config = wan_vae_config_from_shapes(mapped_shapes(vae.source, vae.format), vae.source.path());
  if (vae.hf) check_against_config(*vae.hf, vae.config);
  vae.normalization_source = pick_normalization(options, vae.hf, vae.source.path(), vae.config);
  return vae;
}

}  // namespace

WanVaeHeader read_wan_vae_header(const std::string& path, const WanVaeLoadOptions& options) {
  OpenedWanVae vae = open_wan_vae(path, options);
  return {.config = vae.config, .source_path = vae.source.path(), .normalization_source = vae.normalization_source};
}

LoadedWanVae load_wan_vae(const std::string& path, const WanVaeLoadOptions& options) {
  OpenedWanVae vae = open_wan_vae(path, options);
  WanVaeConfig c = vae.config;
  c.dtype = options.dtype;
  c.device = options.device;
  c.initialize = false;

  LoadedWanVae out;
  out.model = std::make_shared<WanVae>(c);
  out.report = load_mapped(*out.model, vae.source, vae.format);
  out.format = std::move(vae.format);
  out.source_path = vae.source.path();
  out.config_json = vae.hf ? vae.hf->path : "";
  out.normalization_source = vae.normalization_source;
  return out;
}

}  // namespace wick::vae
