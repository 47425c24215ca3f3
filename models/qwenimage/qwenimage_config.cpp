#include "models/qwenimage/qwenimage_config.h"

#include <filesystem>
#include <fstream>
#include <numeric>

#include <nlohmann/json.hpp>

#include "models/weights/key_map.h"
#include "runtime/error.h"

namespace wick::qwenimage {
namespace {

constexpr int64_t kFrequencyDim = 256;  // the timestep sinusoid's width

void add_linear(std::map<std::string, Shape>& out, const std::string& name, int64_t in, int64_t out_features) {
  out[name + ".weight"] = {out_features, in};
  out[name + ".bias"] = {out_features};
}

void add_block(std::map<std::string, Shape>& out, const std::string& p, const QwenImageConfig& c) {
  for (const char* name : {"to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out"})
    add_linear(out, p + "attn." + name, c.dim, c.dim);
  for (const char* norm : {"norm_q", "norm_k", "norm_added_q", "norm_added_k"})
    out[p + "attn." + norm + ".weight"] = {c.head_dim()};
  for (const char* stream : {"img", "txt"}) {
    add_linear(out, p + stream + "_mod.1", c.dim, 6 * c.dim);
    add_linear(out, p + stream + "_mlp.net.0.proj", c.dim, c.mlp_hidden);
    add_linear(out, p + stream + "_mlp.net.2", c.mlp_hidden, c.dim);
  }
}

// A hint for the usual reason a diffusers name is absent: a ComfyUI prefix the caller did not strip.
std::string format_hint(const std::map<std::string, Shape>& shapes) {
  for (const auto& [name, shape] : shapes)
    if (name.rfind("model.diffusion_model.", 0) == 0 || name.rfind("diffusion_model.", 0) == 0)
      return " (the names carry ComfyUI's prefix, e.g. '" + name +
             "': load through qwenimage::detect_weight_format, which strips it)";
  return " (expected diffusers' names, e.g. transformer_blocks.0.attn.to_q.weight)";
}

const Shape& require(const std::map<std::string, Shape>& shapes, const std::string& name, size_t rank,
                     const char* what) {
  auto it = shapes.find(name);
  WICK_CHECK_KIND(Data, it != shapes.end(), "Qwen-Image config: tensor '", name, "' is missing (it gives ", what, ")",
                  format_hint(shapes));
  WICK_CHECK_KIND(Data, it->second.size() == rank && numel(it->second) > 0, "Qwen-Image config: tensor '", name,
                  "' has shape ", it->second, ", expected a non-empty ", rank, "-d tensor (it gives ", what, ")");
  return it->second;
}

std::string list_string(const std::vector<int64_t>& values) {
  std::string s = "[";
  for (size_t i = 0; i < values.size(); ++i) s += (i ? ", " : "") + std::to_string(values[i]);
  return s + "]";
}

int64_t count_layers(const std::map<std::string, Shape>& shapes) {
  std::vector<std::string> names;
  for (const auto& [name, shape] : shapes) names.push_back(name);
  const int64_t n = count_blocks(names, "transformer_blocks.");
  for (int64_t i = 0; i < n; ++i) {
    const std::string block = "transformer_blocks." + std::to_string(i) + ".";
    bool present = false;
    for (const std::string& name : names) present = present || name.rfind(block, 0) == 0;
    WICK_CHECK_KIND(Data, present, "Qwen-Image config: transformer_blocks.", i,
                    " has no tensors but transformer_blocks.", n - 1, " has: a block is missing");
  }
  return n;
}

}  // namespace

void validate(const QwenImageConfig& c) {
  WICK_CHECK_KIND(Config, c.out_channels > 0 && c.patch_size > 0 && c.in_channels == c.patch_features(),
                  "Qwen-Image: in_channels ", c.in_channels, " must be out_channels ", c.out_channels, " x patch ",
                  c.patch_size, " x ", c.patch_size, " (packed latents)");
  WICK_CHECK_KIND(Config, c.dim > 0 && c.n_heads > 0 && c.dim % c.n_heads == 0, "Qwen-Image: dim ", c.dim,
                  " is not divisible into ", c.n_heads, " heads");
  WICK_CHECK_KIND(Config, c.n_layers > 0 && c.mlp_hidden > 0 && c.text_dim > 0, "Qwen-Image: n_layers ", c.n_layers,
                  ", mlp_hidden ", c.mlp_hidden, " and text_dim ", c.text_dim, " must be positive");
  WICK_CHECK_KIND(Config, c.theta > 0, "Qwen-Image: the RoPE theta must be positive");
  WICK_CHECK_KIND(Config, c.axes_dims.size() == 3, "Qwen-Image: axes_dims ", list_string(c.axes_dims),
                  " must have one entry per position axis (frame, row, column)");
  for (int64_t d : c.axes_dims)
    WICK_CHECK_KIND(Config, d > 0 && d % 2 == 0, "Qwen-Image: every axes_dims entry must be positive and even, got ",
                    list_string(c.axes_dims));
  const int64_t sum = std::accumulate(c.axes_dims.begin(), c.axes_dims.end(), int64_t{0});
  WICK_CHECK_KIND(Config, sum == c.head_dim(), "Qwen-Image: axes_dims ", list_string(c.axes_dims), " sums to ", sum,
                  " but the head width is ", c.head_dim(), " (dim ", c.dim, " / ", c.n_heads, " heads)");
}

std::map<std::string, Shape> parameter_shapes(const QwenImageConfig& c) {
  std::map<std::string, Shape> out;
  add_linear(out, "time_text_embed.timestep_embedder.linear_1", kFrequencyDim, c.dim);
  add_linear(out, "time_text_embed.timestep_embedder.linear_2", c.dim, c.dim);
  out["txt_norm.weight"] = {c.text_dim};
  add_linear(out, "img_in", c.in_channels, c.dim);
  add_linear(out, "txt_in", c.text_dim, c.dim);
  for (int64_t i = 0; i < c.n_layers; ++i) add_block(out, "transformer_blocks." + std::to_string(i) + ".", c);
  add_linear(out, "norm_out.linear", c.dim, 2 * c.dim);
  add_linear(out, "proj_out", c.dim, c.patch_features());
  return out;
}

std::vector<std::string> block_paths(const QwenImageConfig& c) {
  std::vector<std::string> paths;
  for (int64_t i = 0; i < c.n_layers; ++i) paths.push_back("transformer_blocks." + std::to_string(i));
  return paths;
}

QwenImageConfig config_from_shapes(const std::map<std::string, Shape>& shapes, const QwenImageJson& json) {
  QwenImageConfig c;
  c.axes_dims = json.axes_dims;
  c.patch_size = json.patch_size;
  c.zero_cond_t = json.zero_cond_t;
  const Shape& img_in = require(shapes, "img_in.weight", 2, "dim and in_channels");
  c.dim = img_in[0];
  c.in_channels = img_in[1];
  c.text_dim = require(shapes, "txt_in.weight", 2, "the text width")[1];
  const int64_t out_features = require(shapes, "proj_out.weight", 2, "out_channels")[0];
  const int64_t patch_area = c.patch_size * c.patch_size;
  WICK_CHECK_KIND(Data, out_features % patch_area == 0 && out_features == c.in_channels,
                  "Qwen-Image config: proj_out.weight has ", out_features, " rows and img_in.weight ", c.in_channels,
                  " columns; both must be channels x ", c.patch_size, " x ", c.patch_size, " (packed latents)");
  c.out_channels = out_features / patch_area;
  c.n_layers = count_layers(shapes);
  WICK_CHECK_KIND(Data, c.n_layers > 0, "Qwen-Image config: no transformer_blocks.N tensors", format_hint(shapes));
  const int64_t head = require(shapes, "transformer_blocks.0.attn.norm_q.weight", 1, "the head width")[0];
  WICK_CHECK_KIND(Data, c.dim % head == 0, "Qwen-Image config: dim ", c.dim,
                  " (img_in.weight) is not a multiple of the head width ", head,
                  " (transformer_blocks.0.attn.norm_q.weight)");
  c.n_heads = c.dim / head;
  c.mlp_hidden = require(shapes, "transformer_blocks.0.img_mlp.net.0.proj.weight", 2, "the MLP width")[0];
  const int64_t axes_sum = std::accumulate(c.axes_dims.begin(), c.axes_dims.end(), int64_t{0});
  WICK_CHECK_KIND(Data, axes_sum == head, "Qwen-Image config: axes_dims_rope ", list_string(c.axes_dims), " sums to ",
                  axes_sum, " but the head width is ", head,
                  " (transformer_blocks.0.attn.norm_q.weight); pass the model's RoPE layout (its config.json)");
  validate(c);

  const std::map<std::string, Shape> expected = parameter_shapes(c);
  for (const auto& [name, shape] : expected) {
    auto it = shapes.find(name);
    WICK_CHECK_KIND(Data, it != shapes.end(), "Qwen-Image config: tensor '", name, "' is missing (expected shape ",
                    shape, " for dim ", c.dim, ", ", c.n_heads, " heads, ", c.n_layers, " blocks)",
                    format_hint(shapes));
    WICK_CHECK_KIND(Data, it->second == shape, "Qwen-Image config: tensor '", name, "' has shape ", it->second,
                    " but dim ", c.dim, ", head width ", head, ", MLP ", c.mlp_hidden, ", text_dim ", c.text_dim,
                    ", in_channels ", c.in_channels, " (read from img_in, norm_q, img_mlp, txt_in) require ", shape);
  }
  static const char* kPrefixes[] = {"time_text_embed.",    "txt_norm.", "img_in.",  "txt_in.",
                                    "transformer_blocks.", "norm_out.", "proj_out."};
  for (const auto& [name, shape] : shapes) {
    bool ours = false;
    for (const char* prefix : kPrefixes) ours = ours || name.rfind(prefix, 0) == 0;
    WICK_CHECK_KIND(Data, !ours || expected.count(name), "Qwen-Image config: tensor '", name, "' ", shape,
                    " is not a parameter of the Qwen-Image model the other shapes describe");
  }
  return c;
}

QwenImageJson config_json_of(const std::string& weights_path) {
  namespace fs = std::filesystem;
  const fs::path path(weights_path);
  std::vector<fs::path> candidates;
  if (fs::is_directory(path)) candidates = {path / "config.json", path / "transformer" / "config.json"};
  else candidates = {path.parent_path() / "config.json"};
  QwenImageJson out;
  for (const fs::path& candidate : candidates) {
    if (!fs::is_regular_file(candidate)) continue;
    std::ifstream in(candidate);
    nlohmann::json json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (json.is_discarded() || !json.is_object() || !json.contains("axes_dims_rope")) continue;
    try {
      out.axes_dims = json.at("axes_dims_rope").get<std::vector<int64_t>>();
      if (json.contains("patch_size")) out.patch_size = json.at("patch_size").get<int64_t>();
      if (json.contains("zero_cond_t")) out.zero_cond_t = json.at("zero_cond_t").get<bool>();
      for (const char* flag : {"use_additional_t_cond", "use_layer3d_rope"})
        WICK_CHECK_KIND(Data, !json.contains(flag) || !json.at(flag).get<bool>(), "Qwen-Image: ", candidate.string(),
                        " sets ", flag, ", a Qwen-Image-Layered model, which wick does not run");
    } catch (const nlohmann::json::exception& e) {
      WICK_FAIL(Data, "Qwen-Image: ", candidate.string(), ": axes_dims_rope, patch_size or zero_cond_t is malformed (",
                e.what(), ")");
    }
    return out;
  }
  return out;
}

}  // namespace wick::qwenimage
