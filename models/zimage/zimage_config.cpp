#include "models/zimage/zimage_config.h"

#include <filesystem>
#include <fstream>
#include <numeric>

#include <nlohmann/json.hpp>

#include "models/weights/key_map.h"
#include "runtime/error.h"

namespace wick::zimage {
namespace {

constexpr int64_t kFrequencyDim = 256;  // t_embedder's sinusoidal features

void add_linear(std::map<std::string, Shape>& out, const std::string& name, int64_t in, int64_t out_features,
                bool bias) {
  out[name + ".weight"] = {out_features, in};
  if (bias) out[name + ".bias"] = {out_features};
}

void add_block(std::map<std::string, Shape>& out, const std::string& p, const ZImageConfig& c, bool modulated) {
  for (const char* name : {"to_q", "to_k", "to_v", "to_out.0"})
    add_linear(out, p + "attention." + name, c.dim, c.dim, false);
  out[p + "attention.norm_q.weight"] = {c.head_dim()};
  out[p + "attention.norm_k.weight"] = {c.head_dim()};
  add_linear(out, p + "feed_forward.w1", c.dim, c.ffn_hidden, false);
  add_linear(out, p + "feed_forward.w3", c.dim, c.ffn_hidden, false);
  add_linear(out, p + "feed_forward.w2", c.ffn_hidden, c.dim, false);
  for (const char* norm : {"attention_norm1", "attention_norm2", "ffn_norm1", "ffn_norm2"})
    out[p + norm + ".weight"] = {c.dim};
  if (modulated) add_linear(out, p + "adaLN_modulation.0", c.adaln_dim(), 4 * c.dim, true);
}

// A hint for the usual reason a diffusers name is absent: ComfyUI's names.
std::string format_hint(const std::map<std::string, Shape>& shapes) {
  for (const auto& [name, shape] : shapes)
    if (name.find("attention.qkv.") != std::string::npos || name.rfind("x_embedder.", 0) == 0 ||
        name.rfind("model.diffusion_model.", 0) == 0)
      return " (the names are ComfyUI's, e.g. '" + name +
             "': load through zimage::detect_weight_format, which maps them)";
  return " (expected diffusers' names, e.g. layers.0.attention.to_q.weight)";
}

const Shape& require(const std::map<std::string, Shape>& shapes, const std::string& name, size_t rank,
                     const char* what) {
  auto it = shapes.find(name);
  WICK_CHECK_KIND(Data, it != shapes.end(), "Z-Image config: tensor '", name, "' is missing (it gives ", what, ")",
                  format_hint(shapes));
  WICK_CHECK_KIND(Data, it->second.size() == rank && numel(it->second) > 0, "Z-Image config: tensor '", name,
                  "' has shape ", it->second, ", expected a non-empty ", rank, "-d tensor (it gives ", what, ")");
  return it->second;
}

std::string list_string(const std::vector<int64_t>& values) {
  std::string s = "[";
  for (size_t i = 0; i < values.size(); ++i) s += (i ? ", " : "") + std::to_string(values[i]);
  return s + "]";
}

int64_t blocks_under(const std::map<std::string, Shape>& shapes, const std::string& prefix) {
  std::vector<std::string> names;
  for (const auto& [name, shape] : shapes) names.push_back(name);
  const int64_t n = count_blocks(names, prefix);
  for (int64_t i = 0; i < n; ++i) {
    const std::string block = prefix + std::to_string(i) + ".";
    bool present = false;
    for (const std::string& name : names) present = present || name.rfind(block, 0) == 0;
    WICK_CHECK_KIND(Data, present, "Z-Image config: ", prefix, i, " has no tensors but ", prefix, n - 1,
                    " has: a block is missing");
  }
  return n;
}

}  // namespace

void validate(const ZImageConfig& c) {
  WICK_CHECK_KIND(Config, c.in_channels > 0 && c.patch_size > 0, "Z-Image: in_channels ", c.in_channels,
                  " and patch_size ", c.patch_size, " must be positive");
  WICK_CHECK_KIND(Config, c.dim > 0 && c.n_heads > 0 && c.dim % c.n_heads == 0, "Z-Image: dim ", c.dim,
                  " is not divisible into ", c.n_heads, " heads");
  WICK_CHECK_KIND(Config, c.n_layers >= 0 && c.n_refiner_layers >= 0 && c.n_layers + c.n_refiner_layers > 0,
                  "Z-Image: n_layers ", c.n_layers, " and n_refiner_layers ", c.n_refiner_layers,
                  " must be non-negative with at least one block");
  WICK_CHECK_KIND(Config, c.ffn_hidden > 0 && c.cap_feat_dim > 0 && c.t_hidden > 0, "Z-Image: ffn_hidden ",
                  c.ffn_hidden, ", cap_feat_dim ", c.cap_feat_dim, " and t_hidden ", c.t_hidden, " must be positive");
  WICK_CHECK_KIND(Config, c.norm_eps > 0 && c.t_scale > 0 && c.rope.theta > 0,
                  "Z-Image: norm_eps, t_scale and rope theta must be positive");
  const ZImageRope& r = c.rope;
  WICK_CHECK_KIND(Config, r.axes_dims.size() == 3 && r.axes_lens.size() == 3, "Z-Image: axes_dims ",
                  list_string(r.axes_dims), " and axes_lens ", list_string(r.axes_lens),
                  " must have one entry per position axis (caption index, row, column): three each");
  for (size_t i = 0; i < r.axes_dims.size(); ++i)
    WICK_CHECK_KIND(Config, r.axes_dims[i] > 0 && r.axes_dims[i] % 2 == 0 && r.axes_lens[i] > 0,
                    "Z-Image: every axes_dims entry must be positive and even and every axes_lens entry positive, got ",
                    list_string(r.axes_dims), " and ", list_string(r.axes_lens));
  const int64_t sum = std::accumulate(r.axes_dims.begin(), r.axes_dims.end(), int64_t{0});
  WICK_CHECK_KIND(Config, sum == c.head_dim(), "Z-Image: axes_dims ", list_string(r.axes_dims), " sums to ", sum,
                  " but the head width is ", c.head_dim(), " (dim ", c.dim, " / ", c.n_heads, " heads)");
}

std::map<std::string, Shape> parameter_shapes(const ZImageConfig& c) {
  std::map<std::string, Shape> out;
  const std::string patch = std::to_string(c.patch_size) + "-1";
  out["x_pad_token"] = {1, c.dim};
  out["cap_pad_token"] = {1, c.dim};
  add_linear(out, "all_x_embedder." + patch, c.patch_features(), c.dim, true);
  add_linear(out, "all_final_layer." + patch + ".linear", c.dim, c.patch_features(), true);
  add_linear(out, "all_final_layer." + patch + ".adaLN_modulation.1", c.adaln_dim(), c.dim, true);
  add_linear(out, "t_embedder.mlp.0", kFrequencyDim, c.t_hidden, true);
  add_linear(out, "t_embedder.mlp.2", c.t_hidden, c.adaln_dim(), true);
  out["cap_embedder.0.weight"] = {c.cap_feat_dim};
  add_linear(out, "cap_embedder.1", c.cap_feat_dim, c.dim, true);
  for (int64_t i = 0; i < c.n_refiner_layers; ++i) {
    add_block(out, "noise_refiner." + std::to_string(i) + ".", c, true);
    add_block(out, "context_refiner." + std::to_string(i) + ".", c, false);
  }
  for (int64_t i = 0; i < c.n_layers; ++i) add_block(out, "layers." + std::to_string(i) + ".", c, true);
  return out;
}

std::vector<std::string> block_paths(const ZImageConfig& c) {
  std::vector<std::string> paths;
  for (int64_t i = 0; i < c.n_refiner_layers; ++i) paths.push_back("noise_refiner." + std::to_string(i));
  for (int64_t i = 0; i < c.n_refiner_layers; ++i) paths.push_back("context_refiner." + std::to_string(i));
  for (int64_t i = 0; i < c.n_layers; ++i) paths.push_back("layers." + std::to_string(i));
  return paths;
}

ZImageConfig config_from_shapes(const std::map<std::string, Shape>& shapes, const ZImageRope& rope) {
  ZImageConfig c;
  c.rope = rope;
  std::string embedder;
  for (const auto& [name, shape] : shapes)
    if (name.rfind("all_x_embedder.", 0) == 0 && name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0)
      embedder = name;
  WICK_CHECK_KIND(Data, !embedder.empty(),
                  "Z-Image config: no all_x_embedder.<patch>-<frame patch>.weight tensor (it "
                  "gives dim, in_channels and the patch size)",
                  format_hint(shapes));
  const std::string patch_key = embedder.substr(15, embedder.size() - 15 - 7);
  WICK_CHECK_KIND(Data,
                  patch_key.size() >= 3 && patch_key.substr(patch_key.size() - 2) == "-1" &&
                      patch_key.find_first_not_of("0123456789") == patch_key.size() - 2,
                  "Z-Image config: '", embedder, "' names patch '", patch_key,
                  "'; wick runs one-frame patches ('<p>-1', as the released models' '2-1')");
  c.patch_size = std::stoll(patch_key.substr(0, patch_key.size() - 2));
  const Shape& x_embedder = require(shapes, embedder, 2, "dim and in_channels");
  c.dim = x_embedder[0];
  WICK_CHECK_KIND(Data, c.patch_size > 0 && x_embedder[1] % (c.patch_size * c.patch_size) == 0,
                  "Z-Image config: ", embedder, " ", x_embedder, " takes ", x_embedder[1], " features, not channels x ",
                  c.patch_size, " x ", c.patch_size);
  c.in_channels = x_embedder[1] / (c.patch_size * c.patch_size);
  c.cap_feat_dim = require(shapes, "cap_embedder.1.weight", 2, "cap_feat_dim")[1];
  c.t_hidden = require(shapes, "t_embedder.mlp.0.weight", 2, "the t_embedder width")[0];
  c.n_layers = blocks_under(shapes, "layers.");
  c.n_refiner_layers = blocks_under(shapes, "noise_refiner.");
  const int64_t n_context = blocks_under(shapes, "context_refiner.");
  WICK_CHECK_KIND(Data, n_context == c.n_refiner_layers, "Z-Image config: ", c.n_refiner_layers,
                  " noise_refiner blocks but ", n_context, " context_refiner blocks");
  const std::string first = c.n_layers > 0 ? "layers.0." : "noise_refiner.0.";
  WICK_CHECK_KIND(Data, c.n_layers + c.n_refiner_layers > 0, "Z-Image config: no layers.N or noise_refiner.N tensors",
                  format_hint(shapes));
  const int64_t head = require(shapes, first + "attention.norm_q.weight", 1, "the head width")[0];
  WICK_CHECK_KIND(Data, c.dim % head == 0, "Z-Image config: dim ", c.dim, " (", embedder,
                  ") is not a multiple of the head width ", head, " (", first, "attention.norm_q.weight)");
  c.n_heads = c.dim / head;
  c.ffn_hidden = require(shapes, first + "feed_forward.w1.weight", 2, "the FFN width")[0];
  const int64_t axes_sum = std::accumulate(rope.axes_dims.begin(), rope.axes_dims.end(), int64_t{0});
  WICK_CHECK_KIND(Data, axes_sum == head, "Z-Image config: axes_dims ", list_string(rope.axes_dims), " sums to ",
                  axes_sum, " but the head width is ", head, " (", first,
                  "attention.norm_q.weight); pass the model's "
                  "RoPE layout (its config.json)");
  validate(c);

  std::map<std::string, Shape> expected = parameter_shapes(c);
  for (const auto& [name, shape] : expected) {
    auto it = shapes.find(name);
    WICK_CHECK_KIND(Data, it != shapes.end(), "Z-Image config: tensor '", name, "' is missing (expected shape ", shape,
                    " for dim ", c.dim, ", ", c.n_heads, " heads, ", c.n_layers, " layers, ", c.n_refiner_layers,
                    " refiner layers)", format_hint(shapes));
    WICK_CHECK_KIND(Data, it->second == shape, "Z-Image config: tensor '", name, "' has shape ", it->second,
                    " but dim ", c.dim, ", head width ", head, ", FFN ", c.ffn_hidden, ", in_channels ", c.in_channels,
                    ", cap_feat_dim ", c.cap_feat_dim, " (read from ", embedder, ", norm_q, w1, cap_embedder) require ",
                    shape);
  }
  static const char* kPrefixes[] = {"all_x_embedder.", "all_final_layer.", "t_embedder.", "cap_embedder.", "layers.",
                                    "noise_refiner.",  "context_refiner.", "x_pad_token", "cap_pad_token"};
  for (const auto& [name, shape] : shapes) {
    bool ours = false;
    for (const char* prefix : kPrefixes) ours = ours || name.rfind(prefix, 0) == 0;
    WICK_CHECK_KIND(Data, !ours || expected.count(name), "Z-Image config: tensor '", name, "' ", shape,
                    " is not a parameter of the Z-Image model the other shapes describe");
  }
  return c;
}

ZImageRope rope_from_config_json(const std::string& weights_path) {
  namespace fs = std::filesystem;
  const fs::path path(weights_path);
  std::vector<fs::path> candidates;
  if (fs::is_directory(path)) {
    candidates = {path / "config.json", path / "transformer" / "config.json"};
  } else {
    candidates = {path.parent_path() / "config.json"};
  }
  ZImageRope rope;
  for (const fs::path& candidate : candidates) {
    if (!fs::is_regular_file(candidate)) continue;
    std::ifstream in(candidate);
    nlohmann::json json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (json.is_discarded() || !json.is_object() || !json.contains("axes_dims")) continue;  // not a Z-Image config
    try {
      rope.axes_dims = json.at("axes_dims").get<std::vector<int64_t>>();
      if (json.contains("axes_lens")) rope.axes_lens = json.at("axes_lens").get<std::vector<int64_t>>();
      if (json.contains("rope_theta")) rope.theta = json.at("rope_theta").get<double>();
    } catch (const nlohmann::json::exception& e) {
      WICK_FAIL(Data, "Z-Image: ", candidate.string(), ": axes_dims, axes_lens or rope_theta is malformed (", e.what(),
                ")");
    }
    WICK_CHECK_KIND(Data, rope.axes_dims.size() == rope.axes_lens.size(), "Z-Image: ", candidate.string(),
                    ": axes_dims ", list_string(rope.axes_dims), " and axes_lens ", list_string(rope.axes_lens),
                    " differ in length");
    return rope;
  }
  return rope;
}

}  // namespace wick::zimage
