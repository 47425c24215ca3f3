#include "models/flux/flux_config.h"

#include <numeric>

#include "models/weights/config_shapes.h"
#include "runtime/error.h"
#include "runtime/safetensors.h"

namespace wick::flux {
namespace {

constexpr int64_t kFrequencyDim = 256;  // sinusoidal features of time_in / guidance_in (BFL)

void add_linear(std::map<std::string, Shape>& out, const std::string& name, int64_t in, int64_t out_features,
                bool bias = true) {
  out[name + ".weight"] = {out_features, in};
  if (bias) out[name + ".bias"] = {out_features};
}

// Hints for the two common reasons a BFL name is absent: a ComfyUI prefix, or diffusers' names.
std::string format_hint(const std::map<std::string, Shape>& shapes) {
  for (const auto& [name, shape] : shapes) {
    if (name.rfind("model.diffusion_model.", 0) == 0)
      return " (the file's names start with 'model.diffusion_model.': strip that prefix)";
    if (name.rfind("transformer_blocks.", 0) == 0 || name.rfind("single_transformer_blocks.", 0) == 0)
      return " (the file uses diffusers' names, e.g. '" + name + "'; wick reads Black Forest Labs' names)";
  }
  return " (expected Black Forest Labs' names, e.g. double_blocks.0.img_attn.qkv.weight)";
}

const Shape& require(const std::map<std::string, Shape>& shapes, const std::string& name, size_t rank,
                     const char* what) {
  return required_shape(shapes, name, rank, what, "Flux config", format_hint(shapes));
}

int64_t count_blocks(const std::map<std::string, Shape>& shapes, const std::string& prefix) {
  return contiguous_blocks(shapes, prefix, "Flux config");
}

std::string axes_string(const std::vector<int64_t>& axes) {
  std::string s = "[";
  for (size_t i = 0; i < axes.size(); ++i) s += (i ? ", " : "") + std::to_string(axes[i]);
  return s + "]";
}

}  // namespace

void validate(const FluxConfig& c) {
  WICK_CHECK_KIND(Config, c.in_channels > 0 && c.in_channels % 4 == 0, "Flux: in_channels ", c.in_channels,
                  " must be a positive multiple of 4 (latent channels x 2 x 2)");
  WICK_CHECK_KIND(Config, c.hidden_size > 0 && c.num_heads > 0 && c.hidden_size % c.num_heads == 0,
                  "Flux: hidden_size ", c.hidden_size, " is not divisible into ", c.num_heads, " heads");
  WICK_CHECK_KIND(Config, c.depth >= 0 && c.depth_single >= 0 && c.depth + c.depth_single > 0,
                  "Flux: depth ", c.depth, " and depth_single ", c.depth_single,
                  " must be non-negative with at least one block");
  WICK_CHECK_KIND(Config, c.context_dim > 0 && c.vec_dim > 0, "Flux: context_dim ", c.context_dim, " and vec_dim ",
                  c.vec_dim, " must be positive");
  WICK_CHECK_KIND(Config, c.mlp_ratio > 0 && c.mlp_hidden() > 0, "Flux: mlp_ratio ", c.mlp_ratio,
                  " gives no MLP width");
  WICK_CHECK_KIND(Config, c.theta > 0, "Flux: theta must be positive, got ", c.theta);
  WICK_CHECK_KIND(Config, !c.axes_dim.empty(), "Flux: axes_dim is empty");
  for (int64_t a : c.axes_dim)
    WICK_CHECK_KIND(Config, a > 0 && a % 2 == 0, "Flux: every axes_dim entry must be positive and even, got ",
                    axes_string(c.axes_dim));
  int64_t sum = std::accumulate(c.axes_dim.begin(), c.axes_dim.end(), int64_t{0});
  WICK_CHECK_KIND(Config, sum == c.head_dim(), "Flux: axes_dim ", axes_string(c.axes_dim), " sums to ", sum,
                  " but the head width is ", c.head_dim(), " (hidden_size ", c.hidden_size, " / ", c.num_heads,
                  " heads)");
}

std::vector<std::string> block_paths(const FluxConfig& config) {
  std::vector<std::string> paths;
  for (int64_t i = 0; i < config.depth; ++i) paths.push_back("double_blocks." + std::to_string(i));
  for (int64_t i = 0; i < config.depth_single; ++i) paths.push_back("single_blocks." + std::to_string(i));
  return paths;
}

std::map<std::string, Shape> parameter_shapes(const FluxConfig& c) {
  const int64_t hidden = c.hidden_size, head = c.head_dim(), mlp = c.mlp_hidden();
  std::map<std::string, Shape> out;
  add_linear(out, "img_in", c.in_channels, hidden);
  add_linear(out, "time_in.in_layer", kFrequencyDim, hidden);
  add_linear(out, "time_in.out_layer", hidden, hidden);
  add_linear(out, "vector_in.in_layer", c.vec_dim, hidden);
  add_linear(out, "vector_in.out_layer", hidden, hidden);
  if (c.guidance_embed) {
    add_linear(out, "guidance_in.in_layer", kFrequencyDim, hidden);
    add_linear(out, "guidance_in.out_layer", hidden, hidden);
  }
  add_linear(out, "txt_in", c.context_dim, hidden);
  for (int64_t i = 0; i < c.depth; ++i) {
    for (const char* stream : {"img", "txt"}) {
      std::string p = "double_blocks." + std::to_string(i) + "." + stream;
      add_linear(out, p + "_mod.lin", hidden, 6 * hidden);
      add_linear(out, p + "_attn.qkv", hidden, 3 * hidden, c.qkv_bias);
      out[p + "_attn.norm.query_norm.scale"] = {head};
      out[p + "_attn.norm.key_norm.scale"] = {head};
      add_linear(out, p + "_attn.proj", hidden, hidden);
      add_linear(out, p + "_mlp.0", hidden, mlp);
      add_linear(out, p + "_mlp.2", mlp, hidden);
    }
  }
  for (int64_t i = 0; i < c.depth_single; ++i) {
    std::string p = "single_blocks." + std::to_string(i) + ".";
    add_linear(out, p + "linear1", hidden, 3 * hidden + mlp);
    add_linear(out, p + "linear2", hidden + mlp, hidden);
    out[p + "norm.query_norm.scale"] = {head};
    out[p + "norm.key_norm.scale"] = {head};
    add_linear(out, p + "modulation.lin", hidden, 3 * hidden);
  }
  add_linear(out, "final_layer.linear", hidden, c.in_channels);
  add_linear(out, "final_layer.adaLN_modulation.1", hidden, 2 * hidden);
  return out;
}

FluxConfig config_from_shapes(const std::map<std::string, Shape>& shapes, std::vector<int64_t> axes_dim) {
  FluxConfig c;
  const Shape& img_in = require(shapes, "img_in.weight", 2, "hidden_size and in_channels");
  c.hidden_size = img_in[0];
  c.in_channels = img_in[1];
  WICK_CHECK_KIND(Data, c.in_channels % 4 == 0, "Flux config: img_in.weight ", img_in, " takes ", c.in_channels,
                  " features, not a multiple of 4 (latent channels x 2 x 2)");
  c.context_dim = require(shapes, "txt_in.weight", 2, "context_dim")[1];
  c.vec_dim = require(shapes, "vector_in.in_layer.weight", 2, "vec_dim")[1];
  c.depth = count_blocks(shapes, "double_blocks.");
  c.depth_single = count_blocks(shapes, "single_blocks.");
  WICK_CHECK_KIND(Data, c.depth + c.depth_single > 0, "Flux config: no double_blocks.N or single_blocks.N tensors",
                  format_hint(shapes));
  const std::string norm_name = c.depth > 0 ? "double_blocks.0.img_attn.norm.query_norm.scale"
                                            : "single_blocks.0.norm.query_norm.scale";
  const int64_t head = require(shapes, norm_name, 1, "the head width")[0];
  WICK_CHECK_KIND(Data, c.hidden_size % head == 0, "Flux config: hidden size ", c.hidden_size, " (img_in.weight ",
                  img_in, ") is not a multiple of the head width ", head, " (", norm_name, ")");
  c.num_heads = c.hidden_size / head;
  int64_t mlp = 0;
  if (c.depth > 0) {
    mlp = require(shapes, "double_blocks.0.img_mlp.0.weight", 2, "the MLP width")[0];
  } else {
    const Shape& linear1 = require(shapes, "single_blocks.0.linear1.weight", 2, "the MLP width");
    mlp = linear1[0] - 3 * c.hidden_size;
  }
  c.mlp_ratio = static_cast<double>(mlp) / static_cast<double>(c.hidden_size);
  WICK_CHECK_KIND(Data, mlp > 0 && c.mlp_hidden() == mlp, "Flux config: MLP width ", mlp,
                  " is not int(hidden ", c.hidden_size, " x a ratio)");
  c.qkv_bias = c.depth == 0 || shapes.count("double_blocks.0.img_attn.qkv.bias") != 0;
  c.guidance_embed = shapes.count("guidance_in.in_layer.weight") != 0;
  const int64_t axes_sum = std::accumulate(axes_dim.begin(), axes_dim.end(), int64_t{0});
  WICK_CHECK_KIND(Data, axes_sum == head, "Flux config: axes_dim ", axes_string(axes_dim), " sums to ", axes_sum,
                  " but the head width is ", head, " (", norm_name, " ", shapes.at(norm_name), ", img_in.weight ",
                  img_in, " gives hidden ", c.hidden_size, "); pass the model's axes_dim");
  c.axes_dim = std::move(axes_dim);
  validate(c);

  // Every parameter of that model, with its shape; and no Flux-looking tensor left over.
  std::map<std::string, Shape> expected = parameter_shapes(c);
  for (const auto& [name, shape] : expected) {
    auto it = shapes.find(name);
    WICK_CHECK_KIND(Data, it != shapes.end(), "Flux config: tensor '", name, "' is missing (expected shape ", shape,
                    " for hidden ", c.hidden_size, ", ", c.num_heads, " heads, ", c.depth, " double + ",
                    c.depth_single, " single blocks)");
    WICK_CHECK_KIND(Data, it->second == shape, "Flux config: tensor '", name, "' has shape ", it->second,
                    " but hidden ", c.hidden_size, ", head width ", head, ", MLP ", mlp, ", in_channels ",
                    c.in_channels, ", context ", c.context_dim, ", vec ", c.vec_dim, " (read from img_in, ",
                    norm_name, ", img_mlp.0, txt_in, vector_in) require ", shape);
  }
  static const char* kFluxPrefixes[] = {"img_in.",      "txt_in.",         "time_in.",      "vector_in.",
                                        "guidance_in.", "double_blocks.",  "single_blocks.", "final_layer."};
  for (const auto& [name, shape] : shapes) {
    bool flux_name = false;
    for (const char* prefix : kFluxPrefixes) flux_name = flux_name || name.rfind(prefix, 0) == 0;
    WICK_CHECK_KIND(Data, !flux_name || expected.count(name), "Flux config: tensor '", name, "' ", shape,
                    " is not a parameter of the Flux model the other shapes describe (qkv_bias ",
                    c.qkv_bias ? "true" : "false", ", guidance_embed ", c.guidance_embed ? "true" : "false", ")");
  }
  return c;
}

std::map<std::string, Shape> tensor_shapes(const SafetensorsFile& file) {
  std::map<std::string, Shape> out;
  for (const std::string& name : file.names()) out[name] = file.info(name).shape;
  return out;
}

}  // namespace wick::flux
