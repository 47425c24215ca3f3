#include "models/sdxl/sdxl_weights.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/autograd/node.h"
#include "models/nn/adapters.h"
#include "runtime/atomic_file.h"
#include "runtime/error.h"
#include "runtime/safetensors.h"

namespace fs = std::filesystem;

namespace wick::sdxl {
namespace {

// LDM resnet child <- diffusers resnet child.
const std::pair<const char*, const char*> kResnetRenames[] = {
    {"in_layers.0", "norm1"},  {"in_layers.2", "conv1"},  {"emb_layers.1", "time_emb_proj"},
    {"out_layers.0", "norm2"}, {"out_layers.3", "conv2"}, {"skip_connection", "conv_shortcut"}};

constexpr const char* kLdmPrefix = "model.diffusion_model.";

bool starts_with_path(const std::string& path, const std::string& prefix) {
  return path == prefix || (path.size() > prefix.size() && path.compare(0, prefix.size(), prefix) == 0 &&
                            path[prefix.size()] == '.');
}

// `path` under block `from` -> the same under block `to`, renaming a resnet's child from one naming to the other
// (`forward`: LDM -> diffusers).
std::string rename_in_block(const std::string& path, const ModuleRename& r, bool forward) {
  const std::string& from = forward ? r.ldm : r.diffusers;
  const std::string& to = forward ? r.diffusers : r.ldm;
  std::string rest = path.substr(from.size());  // "" or ".child..."
  if (!r.resnet || rest.empty()) return to + rest;
  for (const auto& [ldm, diffusers] : kResnetRenames) {
    const std::string a = std::string(".") + (forward ? ldm : diffusers);
    const std::string b = std::string(".") + (forward ? diffusers : ldm);
    if (rest == a || rest.compare(0, a.size() + 1, a + ".") == 0) return to + b + rest.substr(a.size());
  }
  return "";
}

std::string rename_path(const std::string& path, const std::vector<ModuleRename>& renames, bool forward) {
  // The longest matching block wins (input_blocks.1 must not take input_blocks.10's names: the '.' boundary).
  const ModuleRename* best = nullptr;
  for (const ModuleRename& r : renames) {
    const std::string& from = forward ? r.ldm : r.diffusers;
    if (!starts_with_path(path, from)) continue;
    if (!best || from.size() > (forward ? best->ldm : best->diffusers).size()) best = &r;
  }
  return best ? rename_in_block(path, *best, forward) : "";
}

UnetLayout layout_from_diffusers_names(const std::vector<std::string>& names) {
  UnetLayout layout;
  layout.n_levels = count_blocks(names, "down_blocks.");
  layout.num_res_blocks = count_blocks(names, "down_blocks.0.resnets.");
  layout.attention.assign(static_cast<size_t>(layout.n_levels), false);
  for (const std::string& name : names)
    for (int64_t l = 0; l < layout.n_levels; ++l)
      if (name.rfind("down_blocks." + std::to_string(l) + ".attentions.", 0) == 0) layout.attention[l] = true;
  return layout;
}

std::string json_file_of(const std::vector<std::string>& files) {
  if (files.empty()) return "";
  return (fs::path(files.front()).parent_path() / "config.json").string();
}

}  // namespace

UnetLayout layout_of(const UnetConfig& c) {
  UnetLayout layout{.n_levels = c.n_levels(), .num_res_blocks = c.num_res_blocks, .attention = {}};
  for (int64_t l = 0; l < c.n_levels(); ++l) layout.attention.push_back(c.attention(l));
  return layout;
}

std::vector<ModuleRename> module_renames(const UnetLayout& layout) {
  const int64_t levels = layout.n_levels, res = layout.num_res_blocks;
  auto n = [](int64_t i) { return std::to_string(i); };
  std::vector<ModuleRename> t = {{"input_blocks.0.0", "conv_in"},
                                 {"time_embed.0", "time_embedding.linear_1"},
                                 {"time_embed.2", "time_embedding.linear_2"},
                                 {"label_emb.0.0", "add_embedding.linear_1"},
                                 {"label_emb.0.2", "add_embedding.linear_2"},
                                 {"out.0", "conv_norm_out"},
                                 {"out.2", "conv_out"}};
  for (int64_t level = 0; level < levels; ++level) {
    const std::string down = "down_blocks." + n(level);
    for (int64_t j = 0; j < res; ++j) {
      const std::string block = "input_blocks." + n(1 + level * (res + 1) + j);
      t.push_back({block + ".0", down + ".resnets." + n(j), true});
      if (layout.attention[level]) t.push_back({block + ".1", down + ".attentions." + n(j)});
    }
    if (level < levels - 1)
      t.push_back({"input_blocks." + n(1 + level * (res + 1) + res) + ".0.op", down + ".downsamplers.0.conv"});
  }
  t.push_back({"middle_block.0", "mid_block.resnets.0", true});
  t.push_back({"middle_block.1", "mid_block.attentions.0"});
  t.push_back({"middle_block.2", "mid_block.resnets.1", true});
  for (int64_t up = 0; up < levels; ++up) {
    const int64_t level = levels - 1 - up;
    const std::string up_block = "up_blocks." + n(up);
    for (int64_t j = 0; j <= res; ++j) {
      const std::string block = "output_blocks." + n(up * (res + 1) + j);
      t.push_back({block + ".0", up_block + ".resnets." + n(j), true});
      if (layout.attention[level]) t.push_back({block + ".1", up_block + ".attentions." + n(j)});
      if (level > 0 && j == res)
        t.push_back({block + (layout.attention[level] ? ".2.conv" : ".1.conv"), up_block + ".upsamplers.0.conv"});
    }
  }
  return t;
}

std::string ldm_to_diffusers(const std::string& path, const std::vector<ModuleRename>& renames) {
  return rename_path(path, renames, true);
}

std::string diffusers_to_ldm(const std::string& path, const std::vector<ModuleRename>& renames) {
  return rename_path(path, renames, false);
}

const WeightFormat& ldm_format() {
  static const WeightFormat format{.name = "ldm",
                                   .detect_keys = {"input_blocks.0.0.weight", "out.2.weight"},
                                   .prefixes = {"", kLdmPrefix, "diffusion_model."},
                                   .rules = {},
                                   .blocks = {}};
  return format;
}

WeightFormat diffusers_format(const WeightSource& source) {
  WeightFormat format{.name = "diffusers",
                      .detect_keys = {"conv_in.weight", "down_blocks.0.resnets.0.conv1.weight"},
                      .prefixes = {""},
                      .rules = {},
                      .blocks = {}};
  const std::vector<ModuleRename> renames = module_renames(layout_from_diffusers_names(source.names()));
  for (const std::string& name : source.names()) {
    const std::string ldm = diffusers_to_ldm(name, renames);
    if (!ldm.empty() && ldm != name) format.rules.push_back(rename(ldm, name));
  }
  return format;
}

std::vector<WeightFormat> weight_formats(const WeightSource& source) {
  return {ldm_format(), diffusers_format(source)};
}

DetectedFormat detect_weight_format(const WeightSource& source) {
  return detect_format(source, weight_formats(source));
}

ConfigHints diffusers_config_hints(const WeightSource& source) {
  ConfigHints hints;
  const std::string path = json_file_of(source.files());
  std::ifstream in(path);
  if (path.empty() || !in) return hints;
  nlohmann::json json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  WICK_CHECK_KIND(Data, !json.is_discarded(), path, " is not JSON");
  if (!json.is_object()) return hints;
  auto positive = [&](const char* key) -> int64_t {
    if (!json.contains(key) || !json[key].is_number_integer()) return 0;
    const int64_t v = json[key].get<int64_t>();
    return v > 0 ? v : 0;
  };
  hints.norm_groups = positive("norm_num_groups");
  hints.size_embed_dim = positive("addition_time_embed_dim");
  // Heads per level: num_attention_heads when set, else attention_head_dim (diffusers' naming quirk: a head count).
  const char* heads_key = json.contains("num_attention_heads") && !json["num_attention_heads"].is_null()
                              ? "num_attention_heads"
                              : "attention_head_dim";
  if (!json.contains(heads_key) || !json.contains("block_out_channels") || !json["block_out_channels"].is_array())
    return hints;
  std::vector<int64_t> channels, heads;
  for (const auto& c : json["block_out_channels"])
    if (c.is_number_integer()) channels.push_back(c.get<int64_t>());
  if (json[heads_key].is_number_integer()) {
    heads.assign(channels.size(), json[heads_key].get<int64_t>());
  } else if (json[heads_key].is_array()) {
    for (const auto& h : json[heads_key])
      if (h.is_number_integer()) heads.push_back(h.get<int64_t>());
  }
  WICK_CHECK_KIND(Data, heads.size() == channels.size() && !heads.empty(), path, ": ", heads_key,
                  " does not give one head count per level of block_out_channels");
  // One head width for every level (SDXL: 64 = 320/5 = 640/10 = 1280/20), else one head count (SD 1.x: 8).
  bool same_width = true, same_count = true;
  for (size_t l = 0; l < channels.size(); ++l) {
    same_width = same_width && heads[l] > 0 && channels[l] % heads[l] == 0 &&
                 channels[l] / heads[l] == channels[0] / std::max<int64_t>(heads[0], 1);
    same_count = same_count && heads[l] == heads[0];
  }
  if (same_width && heads[0] > 0)
    hints.head_dim = channels[0] / heads[0];
  else if (same_count)
    hints.num_heads = heads[0];
  return hints;
}

LoraLayout lora_layout(const UnetConfig& config) {
  LoraLayout layout;
  layout.peft_prefix = "unet.";
  const std::vector<ModuleRename> renames = module_renames(layout_of(config));
  for (const auto& [name, shape] : parameter_shapes(config)) {
    const std::string suffix = ".weight";
    if (shape.size() != 2 || name.size() <= suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const std::string module = name.substr(0, name.size() - suffix.size());
    const std::string diffusers = ldm_to_diffusers(module, renames);
    if (!diffusers.empty()) layout.modules.push_back({.module = module, .parts = {{.peft_module = diffusers}}});
  }
  return layout;
}

std::string diffusers_config_json(const UnetConfig& c) {
  std::vector<std::string> down, up;
  std::vector<int64_t> channels, heads, depth;
  for (int64_t l = 0; l < c.n_levels(); ++l) {
    down.push_back(c.attention(l) ? "CrossAttnDownBlock2D" : "DownBlock2D");
    channels.push_back(c.level_channels(l));
    heads.push_back(c.heads(c.level_channels(l)));
    depth.push_back(std::max<int64_t>(c.transformer_depth[static_cast<size_t>(l)], 1));
  }
  for (int64_t l = c.n_levels() - 1; l >= 0; --l) up.push_back(c.attention(l) ? "CrossAttnUpBlock2D" : "UpBlock2D");
  nlohmann::json json = {{"_class_name", "UNet2DConditionModel"},
                         {"in_channels", c.in_channels},
                         {"out_channels", c.out_channels},
                         {"layers_per_block", c.num_res_blocks},
                         {"block_out_channels", channels},
                         {"down_block_types", down},
                         {"up_block_types", up},
                         {"mid_block_type", "UNetMidBlock2DCrossAttn"},
                         {"attention_head_dim", heads},
                         {"transformer_layers_per_block", depth},
                         {"cross_attention_dim", c.context_dim},
                         {"use_linear_projection", c.linear_projection},
                         {"norm_num_groups", c.norm_groups},
                         {"flip_sin_to_cos", true},
                         {"freq_shift", 0}};
  if (c.adm_in_channels > 0) {
    json["addition_embed_type"] = "text_time";
    json["addition_time_embed_dim"] = c.size_embed_dim;
    json["projection_class_embeddings_input_dim"] = c.adm_in_channels;
  }
  return json.dump(2) + "\n";
}

fs::path export_unet(const Unet& unet, const fs::path& directory, const std::string& name, DType dtype,
                     const std::map<std::string, std::string>& metadata) {
  const WeightOrigin& origin = unet.weight_origin();
  std::error_code ec;
  fs::create_directories(directory, ec);
  std::vector<std::pair<std::string, Tensor>> tensors;
  if (origin.layout == "diffusers") {
    const std::vector<ModuleRename> renames = module_renames(layout_of(unet.config()));
    for (const auto& [param, tensor] : unet.named_parameters()) {
      const std::string diffusers = ldm_to_diffusers(param, renames);
      WICK_CHECK(!diffusers.empty(), "export_unet: parameter '", param, "' has no diffusers name");
      tensors.emplace_back(diffusers, autograd::detach(tensor).to(dtype));
    }
    const fs::path folder = directory / name;
    fs::create_directories(folder, ec);
    std::string config_text;
    const std::string base_config = json_file_of(origin.files);
    if (std::ifstream in{base_config}; !base_config.empty() && in) {
      config_text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    } else {
      config_text = diffusers_config_json(unet.config());
    }
    write_file_atomically(folder / "config.json", config_text);
    save_safetensors((folder / "diffusion_pytorch_model.safetensors").string(), tensors, metadata);
    return folder;
  }
  const std::string prefix = origin.prefix;
  for (const auto& [param, tensor] : unet.named_parameters())
    tensors.emplace_back(prefix + param, autograd::detach(tensor).to(dtype));
  // A full checkpoint: the VAE and text encoders beside the UNet, unchanged, so that the file replaces the base.
  std::vector<WeightSource> keep_alive;
  if (prefix == kLdmPrefix && !origin.path.empty()) {
    keep_alive.push_back(WeightSource::open(origin.path));
    const WeightSource& base = keep_alive.back();
    for (const std::string& tensor_name : base.names())
      if (tensor_name.rfind(prefix, 0) != 0) tensors.emplace_back(tensor_name, base.get(tensor_name));
  }
  const fs::path file = directory / (name + ".safetensors");
  save_safetensors(file.string(), tensors, metadata);
  return file;
}

}  // namespace wick::sdxl
