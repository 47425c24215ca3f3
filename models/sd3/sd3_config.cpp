#include "models/sd3/sd3_config.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "models/weights/key_map.h"
#include "runtime/error.h"
#include "runtime/shape.h"

namespace wick::sd3 {
namespace {

constexpr int64_t kFrequencyDim = 256;  // sinusoidal features of t_embedder
constexpr int64_t kSaiHeadDim = 64;     // SAI's loader: hidden = 64 · depth, heads = depth

void add_linear(std::map<std::string, Shape>& out, const std::string& name, int64_t in, int64_t out_features) {
  out[name + ".weight"] = {out_features, in};
  out[name + ".bias"] = {out_features};
}


// Hints for the two common reasons a SAI name is absent: a checkpoint prefix, or diffusers' names.
std::string format_hint(const std::map<std::string, Shape>& shapes) {
  for (const auto& [name, shape] : shapes) {
    if (name.rfind("model.diffusion_model.", 0) == 0)
      return " (the names start with 'model.diffusion_model.': strip that prefix)";
    if (name.rfind("transformer_blocks.", 0) == 0)
      return " (the names are diffusers', e.g. '" + name + "'; map them to Stability AI's first)";
  }
  return " (expected Stability AI's names, e.g. joint_blocks.0.x_block.attn.qkv.weight)";
}

const Shape& require(const std::map<std::string, Shape>& shapes, const std::string& name, size_t rank,
                     const char* what) {
  auto it = shapes.find(name);
  WICK_CHECK_KIND(Data, it != shapes.end(), "SD3 config: tensor '", name, "' is missing (it gives ", what, ")",
                  format_hint(shapes));
  WICK_CHECK_KIND(Data, it->second.size() == rank && numel(it->second) > 0, "SD3 config: tensor '", name,
                  "' has shape ", it->second, ", expected a non-empty ", rank, "-d tensor (it gives ", what, ")");
  return it->second;
}

bool sai_name(const std::string& name) {
  static const char* kPrefixes[] = {"x_embedder.", "pos_embed", "t_embedder.", "y_embedder.", "context_embedder.",
                                    "joint_blocks.", "final_layer."};
  for (const char* prefix : kPrefixes)
    if (name.rfind(prefix, 0) == 0) return true;
  return false;
}

// The dual-attention blocks: those with x_block.attn2.qkv.weight. A block holding other attn2 tensors
// without it is inconsistent (SAI's loader would read it by attn2.ln_k and build a different model).
std::vector<int64_t> dual_blocks(const std::map<std::string, Shape>& shapes, int64_t depth) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < depth; ++i) {
    const std::string p = "joint_blocks." + std::to_string(i) + ".x_block.attn2.";
    const bool has_qkv = shapes.count(p + "qkv.weight") != 0;
    if (has_qkv) {
      out.push_back(i);
      continue;
    }
    auto other = shapes.lower_bound(p);
    WICK_CHECK_KIND(Data, other == shapes.end() || other->first.rfind(p, 0) != 0, "SD3 config: tensor '",
                    other == shapes.end() ? std::string() : other->first, "' is there but '", p,
                    "qkv.weight' is not: the file's dual attention (attn2) of block ", i,
                    " is inconsistent (a dual-attention block has attn2.qkv, attn2.proj and, with QK norm, "
                    "attn2.ln_q / ln_k)");
  }
  return out;
}

}  // namespace

bool Sd3Config::dual_attention(int64_t block) const {
  return std::find(dual_attention_layers.begin(), dual_attention_layers.end(), block) != dual_attention_layers.end();
}

Sd3Config Sd3Config::large() { return Sd3Config{}; }

Sd3Config Sd3Config::medium() {
  Sd3Config c;
  c.hidden_size = 1536;
  c.num_heads = 24;
  c.depth = 24;
  c.pos_embed_max_size = 384;
  for (int64_t i = 0; i <= 12; ++i) c.dual_attention_layers.push_back(i);
  return c;
}

void validate(const Sd3Config& c) {
  WICK_CHECK_KIND(Config, c.patch_size > 0 && c.in_channels > 0 && c.out_channels > 0, "SD3: patch_size ",
                  c.patch_size, ", in_channels ", c.in_channels, " and out_channels ", c.out_channels,
                  " must be positive");
  WICK_CHECK_KIND(Config, c.hidden_size > 0 && c.num_heads > 0 && c.hidden_size % c.num_heads == 0,
                  "SD3: hidden_size ", c.hidden_size, " is not divisible into ", c.num_heads, " heads");
  WICK_CHECK_KIND(Config, c.depth > 0, "SD3: depth must be positive, got ", c.depth);
  WICK_CHECK_KIND(Config, c.context_dim > 0 && c.pooled_dim > 0, "SD3: context_dim ", c.context_dim,
                  " and pooled_dim ", c.pooled_dim, " must be positive");
  WICK_CHECK_KIND(Config, c.pos_embed_max_size > 0, "SD3: pos_embed_max_size must be positive, got ",
                  c.pos_embed_max_size);
  WICK_CHECK_KIND(Config, c.mlp_ratio > 0 && c.mlp_hidden() > 0, "SD3: mlp_ratio ", c.mlp_ratio,
                  " gives no MLP width");
  for (int64_t i : c.dual_attention_layers)
    WICK_CHECK_KIND(Config, i >= 0 && i < c.depth, "SD3: dual_attention_layers ", shape_string(c.dual_attention_layers),
                    " names block ", i, ", outside 0..", c.depth - 1);
}

std::map<std::string, Shape> parameter_shapes(const Sd3Config& c) {
  const int64_t h = c.hidden_size, head = c.head_dim(), mlp = c.mlp_hidden(), p = c.patch_size;
  std::map<std::string, Shape> out;
  out["x_embedder.proj.weight"] = {h, c.in_channels, p, p};
  out["x_embedder.proj.bias"] = {h};
  out["pos_embed"] = {1, c.pos_embed_max_size * c.pos_embed_max_size, h};
  add_linear(out, "t_embedder.mlp.0", kFrequencyDim, h);
  add_linear(out, "t_embedder.mlp.2", h, h);
  add_linear(out, "y_embedder.mlp.0", c.pooled_dim, h);
  add_linear(out, "y_embedder.mlp.2", h, h);
  add_linear(out, "context_embedder", c.context_dim, h);
  for (int64_t i = 0; i < c.depth; ++i) {
    const std::string block = "joint_blocks." + std::to_string(i) + ".";
    const bool last = i == c.depth - 1, dual = c.dual_attention(i);
    auto attention = [&](const std::string& a, bool with_proj) {
      add_linear(out, a + ".qkv", h, 3 * h);
      if (c.qk_norm) {
        out[a + ".ln_q.weight"] = {head};
        out[a + ".ln_k.weight"] = {head};
      }
      if (with_proj) add_linear(out, a + ".proj", h, h);
    };
    // x_block: 6-way modulation, 9-way with attn2; context_block: 6-way, 2-way (pre-only) in the last block.
    const std::string x = block + "x_block";
    add_linear(out, x + ".adaLN_modulation.1", h, (dual ? 9 : 6) * h);
    attention(x + ".attn", true);
    if (dual) attention(x + ".attn2", true);
    add_linear(out, x + ".mlp.fc1", h, mlp);
    add_linear(out, x + ".mlp.fc2", mlp, h);
    const std::string ctx = block + "context_block";
    add_linear(out, ctx + ".adaLN_modulation.1", h, (last ? 2 : 6) * h);
    attention(ctx + ".attn", !last);
    if (!last) {
      add_linear(out, ctx + ".mlp.fc1", h, mlp);
      add_linear(out, ctx + ".mlp.fc2", mlp, h);
    }
  }
  add_linear(out, "final_layer.adaLN_modulation.1", h, 2 * h);
  add_linear(out, "final_layer.linear", h, c.out_features());
  return out;
}

Sd3Config config_from_shapes(const std::map<std::string, Shape>& shapes, int64_t head_dim) {
  Sd3Config c;
  const Shape& proj = require(shapes, "x_embedder.proj.weight", 4, "hidden_size, in_channels and patch_size");
  c.hidden_size = proj[0];
  c.in_channels = proj[1];
  c.patch_size = proj[2];
  WICK_CHECK_KIND(Data, proj[3] == proj[2], "SD3 config: x_embedder.proj.weight ", proj,
                  " is not a square patch kernel");
  const Shape& pos = require(shapes, "pos_embed", 3, "the position table's size");
  const auto max = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(pos[1]))));
  WICK_CHECK_KIND(Data, pos[0] == 1 && max * max == pos[1] && pos[2] == c.hidden_size, "SD3 config: pos_embed ", pos,
                  " is not [1, max², ", c.hidden_size, "] (a square table of hidden-wide rows)");
  c.pos_embed_max_size = max;
  c.context_dim = require(shapes, "context_embedder.weight", 2, "the context width")[1];
  c.pooled_dim = require(shapes, "y_embedder.mlp.0.weight", 2, "the pooled width")[1];
  std::vector<std::string> names;
  for (const auto& [name, shape] : shapes) names.push_back(name);
  c.depth = count_blocks(names, "joint_blocks.");
  WICK_CHECK_KIND(Data, c.depth > 0, "SD3 config: no joint_blocks.N tensors", format_hint(shapes));
  const Shape& final_linear = require(shapes, "final_layer.linear.weight", 2, "the output channels");
  WICK_CHECK_KIND(Data, final_linear[0] % (c.patch_size * c.patch_size) == 0, "SD3 config: final_layer.linear.weight ",
                  final_linear, " has ", final_linear[0], " outputs, not patch_size² (", c.patch_size * c.patch_size,
                  ") x channels");
  c.out_channels = final_linear[0] / (c.patch_size * c.patch_size);
  const int64_t mlp = require(shapes, "joint_blocks.0.x_block.mlp.fc1.weight", 2, "the MLP width")[0];
  c.mlp_ratio = static_cast<double>(mlp) / static_cast<double>(c.hidden_size);
  WICK_CHECK_KIND(Data, c.mlp_hidden() == mlp, "SD3 config: MLP width ", mlp, " is not int(hidden ", c.hidden_size,
                  " x a ratio)");
  c.qk_norm = shapes.count("joint_blocks.0.x_block.attn.ln_q.weight") != 0;
  int64_t head = head_dim > 0 ? head_dim : kSaiHeadDim;
  if (c.qk_norm) {
    const int64_t from_norm = require(shapes, "joint_blocks.0.x_block.attn.ln_q.weight", 1, "the head width")[0];
    WICK_CHECK_KIND(Data, head_dim <= 0 || head_dim == from_norm, "SD3 config: model.head_dim is ", head_dim,
                    " but joint_blocks.0.x_block.attn.ln_q.weight gives ", from_norm);
    head = from_norm;
  }
  WICK_CHECK_KIND(Data, c.hidden_size % head == 0, "SD3 config: hidden size ", c.hidden_size,
                  " (x_embedder.proj.weight ", proj, ") is not a multiple of the head width ", head,
                  c.qk_norm ? " (from attn.ln_q)" : " (no QK norm gives it: SAI's 64 unless model.head_dim is set)");
  c.num_heads = c.hidden_size / head;
  c.dual_attention_layers = dual_blocks(shapes, c.depth);
  validate(c);

  // Every parameter of that model, with its shape; and no SAI-named tensor left over.
  const std::map<std::string, Shape> expected = parameter_shapes(c);
  for (const auto& [name, shape] : expected) {
    auto it = shapes.find(name);
    WICK_CHECK_KIND(Data, it != shapes.end(), "SD3 config: tensor '", name, "' is missing (expected shape ", shape,
                    " for hidden ", c.hidden_size, ", ", c.depth, " blocks, QK norm ", c.qk_norm ? "on" : "off",
                    ", dual attention in ", shape_string(c.dual_attention_layers), ")");
    const bool modulation = name.find("x_block.adaLN_modulation.1.") != std::string::npos;
    WICK_CHECK_KIND(Data, it->second == shape, "SD3 config: tensor '", name, "' has shape ", it->second,
                    " but hidden ", c.hidden_size, ", head width ", head, ", MLP ", mlp, ", ", c.in_channels,
                    " channels, patch ", c.patch_size, ", context ", c.context_dim, ", pooled ", c.pooled_dim,
                    " require ", shape,
                    modulation ? " (a dual-attention block, one with x_block.attn2, has a 9-way modulation, "
                                 "the others a 6-way one: the file's attn2 is inconsistent)"
                               : "");
  }
  for (const auto& [name, shape] : shapes)
    WICK_CHECK_KIND(Data, !sai_name(name) || expected.count(name), "SD3 config: tensor '", name, "' ", shape,
                    " is not a parameter of the MMDiT the other shapes describe (", c.depth, " blocks, QK norm ",
                    c.qk_norm ? "on" : "off", ", dual attention in ", shape_string(c.dual_attention_layers), ")");
  return c;
}

std::vector<std::string> block_paths(const Sd3Config& config) {
  std::vector<std::string> paths;
  for (int64_t i = 0; i < config.depth; ++i) paths.push_back("joint_blocks." + std::to_string(i));
  return paths;
}

std::string variant_name(const Sd3Config& c) {
  const bool medium_size = c.hidden_size == 1536 && c.depth == 24;
  if (c.qk_norm && c.hidden_size == 2432 && c.depth == 38 && c.dual_attention_layers.empty()) return "SD3.5 Large";
  if (c.qk_norm && medium_size && !c.dual_attention_layers.empty()) return "SD3.5 Medium";
  if (!c.qk_norm && medium_size && c.dual_attention_layers.empty()) return "SD3 Medium";
  return "SD3 (MMDiT)";
}

}  // namespace wick::sd3
