#include "models/flux2/flux2_config.h"

#include <numeric>

#include "models/weights/config_shapes.h"
#include "runtime/error.h"

namespace wick::flux2 {
namespace {

constexpr int64_t kFrequencyDim = 256;  // sinusoidal features of time_in / guidance_in (BFL)
constexpr int64_t kAxes = 4;            // (T, H, W, L)

// Every FLUX.2 Linear is bias-free.
void add_linear(std::map<std::string, Shape>& out, const std::string& name, int64_t in, int64_t out_features) {
  out[name + ".weight"] = {out_features, in};
}

// Hints for the usual reasons a BFL name is absent: a ComfyUI prefix, diffusers' names, a Flux.1 file.
std::string format_hint(const std::map<std::string, Shape>& shapes) {
  for (const auto& [name, shape] : shapes) {
    if (name.rfind("model.diffusion_model.", 0) == 0 || name.rfind("diffusion_model.", 0) == 0)
      return " (the names carry ComfyUI's prefix, e.g. '" + name +
             "': load through flux2::detect_weight_format, which strips it)";
    if (name.rfind("transformer_blocks.", 0) == 0 || name.rfind("single_transformer_blocks.", 0) == 0)
      return " (the names are diffusers', e.g. '" + name + "': load through flux2::detect_weight_format)";
    if (name.rfind("vector_in.", 0) == 0 || name.find("_mod.lin.") != std::string::npos)
      return " (the file has per-block modulation or vector_in, as Flux.1: it is not a FLUX.2 model)";
  }
  return " (expected Black Forest Labs' FLUX.2 names, e.g. double_blocks.0.img_attn.qkv.weight)";
}

const Shape& require(const std::map<std::string, Shape>& shapes, const std::string& name, size_t rank,
                     const char* what) {
  return required_shape(shapes, name, rank, what, "FLUX.2 config", format_hint(shapes));
}

int64_t count_blocks(const std::map<std::string, Shape>& shapes, const std::string& prefix) {
  return contiguous_blocks(shapes, prefix, "FLUX.2 config");
}

std::string axes_string(const std::vector<int64_t>& axes) {
  std::string s = "[";
  for (size_t i = 0; i < axes.size(); ++i) s += (i ? ", " : "") + std::to_string(axes[i]);
  return s + "]";
}

}  // namespace

Flux2Config klein_4b_config() {
  return Flux2Config{.hidden_size = 3072, .num_heads = 24, .depth = 5, .depth_single = 20, .context_dim = 7680,
                     .guidance_embed = false};
}

Flux2Config klein_9b_config() {
  return Flux2Config{.hidden_size = 4096, .num_heads = 32, .depth = 8, .depth_single = 24, .context_dim = 12288,
                     .guidance_embed = false};
}

void validate(const Flux2Config& c) {
  WICK_CHECK_KIND(Config, c.in_channels > 0, "FLUX.2: in_channels ", c.in_channels, " must be positive");
  WICK_CHECK_KIND(Config, c.hidden_size > 0 && c.num_heads > 0 && c.hidden_size % c.num_heads == 0,
                  "FLUX.2: hidden_size ", c.hidden_size, " is not divisible into ", c.num_heads, " heads");
  WICK_CHECK_KIND(Config, c.depth >= 0 && c.depth_single >= 0 && c.depth + c.depth_single > 0, "FLUX.2: depth ",
                  c.depth, " and depth_single ", c.depth_single, " must be non-negative with at least one block");
  WICK_CHECK_KIND(Config, c.context_dim > 0, "FLUX.2: context_dim ", c.context_dim, " must be positive");
  WICK_CHECK_KIND(Config, c.mlp_ratio > 0 && c.mlp_hidden() > 0, "FLUX.2: mlp_ratio ", c.mlp_ratio,
                  " gives no MLP width");
  WICK_CHECK_KIND(Config, c.theta > 0, "FLUX.2: theta must be positive, got ", c.theta);
  WICK_CHECK_KIND(Config, static_cast<int64_t>(c.axes_dim.size()) == kAxes, "FLUX.2: axes_dim ",
                  axes_string(c.axes_dim), " must have one entry per position axis (T, H, W, L)");
  for (int64_t a : c.axes_dim)
    WICK_CHECK_KIND(Config, a > 0 && a % 2 == 0, "FLUX.2: every axes_dim entry must be positive and even, got ",
                    axes_string(c.axes_dim));
  const int64_t sum = std::accumulate(c.axes_dim.begin(), c.axes_dim.end(), int64_t{0});
  WICK_CHECK_KIND(Config, sum == c.head_dim(), "FLUX.2: axes_dim ", axes_string(c.axes_dim), " sums to ", sum,
                  " but the head width is ", c.head_dim(), " (hidden_size ", c.hidden_size, " / ", c.num_heads,
                  " heads)");
}

std::vector<std::string> block_paths(const Flux2Config& config) {
  std::vector<std::string> paths;
  for (int64_t i = 0; i < config.depth; ++i) paths.push_back("double_blocks." + std::to_string(i));
  for (int64_t i = 0; i < config.depth_single; ++i) paths.push_back("single_blocks." + std::to_string(i));
  return paths;
}

std::map<std::string, Shape> parameter_shapes(const Flux2Config& c) {
  const int64_t hidden = c.hidden_size, head = c.head_dim(), mlp = c.mlp_hidden();
  std::map<std::string, Shape> out;
  add_linear(out, "img_in", c.in_channels, hidden);
  add_linear(out, "txt_in", c.context_dim, hidden);
  add_linear(out, "time_in.in_layer", kFrequencyDim, hidden);
  add_linear(out, "time_in.out_layer", hidden, hidden);
  if (c.guidance_embed) {
    add_linear(out, "guidance_in.in_layer", kFrequencyDim, hidden);
    add_linear(out, "guidance_in.out_layer", hidden, hidden);
  }
  add_linear(out, "double_stream_modulation_img.lin", hidden, 6 * hidden);
  add_linear(out, "double_stream_modulation_txt.lin", hidden, 6 * hidden);
  add_linear(out, "single_stream_modulation.lin", hidden, 3 * hidden);
  for (int64_t i = 0; i < c.depth; ++i) {
    for (const char* stream : {"img", "txt"}) {
      const std::string p = "double_blocks." + std::to_string(i) + "." + stream;
      add_linear(out, p + "_attn.qkv", hidden, 3 * hidden);
      out[p + "_attn.norm.query_norm.scale"] = {head};
      out[p + "_attn.norm.key_norm.scale"] = {head};
      add_linear(out, p + "_attn.proj", hidden, hidden);
      add_linear(out, p + "_mlp.0", hidden, 2 * mlp);
      add_linear(out, p + "_mlp.2", mlp, hidden);
    }
  }
  for (int64_t i = 0; i < c.depth_single; ++i) {
    const std::string p = "single_blocks." + std::to_string(i) + ".";
    add_linear(out, p + "linear1", hidden, 3 * hidden + 2 * mlp);
    add_linear(out, p + "linear2", hidden + mlp, hidden);
    out[p + "norm.query_norm.scale"] = {head};
    out[p + "norm.key_norm.scale"] = {head};
  }
  add_linear(out, "final_layer.linear", hidden, c.in_channels);
  add_linear(out, "final_layer.adaLN_modulation.1", hidden, 2 * hidden);
  return out;
}

Flux2Config config_from_shapes(const std::map<std::string, Shape>& shapes, std::vector<int64_t> axes_dim) {
  Flux2Config c;
  const Shape& img_in = require(shapes, "img_in.weight", 2, "hidden_size and in_channels");
  c.hidden_size = img_in[0];
  c.in_channels = img_in[1];
  c.context_dim = require(shapes, "txt_in.weight", 2, "context_dim")[1];
  require(shapes, "single_stream_modulation.lin.weight", 2, "the shared modulation");
  c.depth = count_blocks(shapes, "double_blocks.");
  c.depth_single = count_blocks(shapes, "single_blocks.");
  WICK_CHECK_KIND(Data, c.depth + c.depth_single > 0, "FLUX.2 config: no double_blocks.N or single_blocks.N tensors",
                  format_hint(shapes));
  const std::string norm_name = c.depth > 0 ? "double_blocks.0.img_attn.norm.query_norm.scale"
                                            : "single_blocks.0.norm.query_norm.scale";
  const int64_t head = require(shapes, norm_name, 1, "the head width")[0];
  WICK_CHECK_KIND(Data, c.hidden_size % head == 0, "FLUX.2 config: hidden size ", c.hidden_size, " (img_in.weight ",
                  img_in, ") is not a multiple of the head width ", head, " (", norm_name, ")");
  c.num_heads = c.hidden_size / head;
  const int64_t mlp = c.depth > 0 ? require(shapes, "double_blocks.0.img_mlp.2.weight", 2, "the MLP width")[1]
                                  : require(shapes, "single_blocks.0.linear2.weight", 2, "the MLP width")[1] -
                                        c.hidden_size;
  c.mlp_ratio = static_cast<double>(mlp) / static_cast<double>(c.hidden_size);
  WICK_CHECK_KIND(Data, mlp > 0 && c.mlp_hidden() == mlp, "FLUX.2 config: MLP width ", mlp,
                  " is not int(hidden ", c.hidden_size, " x a ratio)");
  c.guidance_embed = shapes.count("guidance_in.in_layer.weight") != 0;
  if (axes_dim.empty()) {
    WICK_CHECK_KIND(Data, head % (2 * kAxes) == 0, "FLUX.2 config: the head width ", head, " (", norm_name,
                    ") does not split into four even RoPE axes; pass the model's axes_dim");
    axes_dim.assign(kAxes, head / kAxes);
  }
  const int64_t axes_sum = std::accumulate(axes_dim.begin(), axes_dim.end(), int64_t{0});
  WICK_CHECK_KIND(Data, axes_sum == head, "FLUX.2 config: axes_dim ", axes_string(axes_dim), " sums to ", axes_sum,
                  " but the head width is ", head, " (", norm_name, " ", shapes.at(norm_name), ", img_in.weight ",
                  img_in, " gives hidden ", c.hidden_size, "); pass the model's axes_dim");
  c.axes_dim = std::move(axes_dim);
  validate(c);

  // Every parameter of that model, with its shape; and no FLUX.2-looking tensor left over.
  const std::map<std::string, Shape> expected = parameter_shapes(c);
  for (const auto& [name, shape] : expected) {
    auto it = shapes.find(name);
    WICK_CHECK_KIND(Data, it != shapes.end(), "FLUX.2 config: tensor '", name, "' is missing (expected shape ", shape,
                    " for hidden ", c.hidden_size, ", ", c.num_heads, " heads, ", c.depth, " double + ",
                    c.depth_single, " single blocks)", format_hint(shapes));
    WICK_CHECK_KIND(Data, it->second == shape, "FLUX.2 config: tensor '", name, "' has shape ", it->second,
                    " but hidden ", c.hidden_size, ", head width ", head, ", MLP ", mlp, ", in_channels ",
                    c.in_channels, ", context ", c.context_dim, " (read from img_in, ", norm_name,
                    ", img_mlp.2, txt_in) require ", shape);
  }
  static const char* kPrefixes[] = {"img_in.",        "txt_in.",        "time_in.",     "guidance_in.",
                                    "double_blocks.", "single_blocks.", "final_layer.", "double_stream_modulation_",
                                    "single_stream_modulation."};
  for (const auto& [name, shape] : shapes) {
    bool ours = false;
    for (const char* prefix : kPrefixes) ours = ours || name.rfind(prefix, 0) == 0;
    WICK_CHECK_KIND(Data, !ours || expected.count(name), "FLUX.2 config: tensor '", name, "' ", shape,
                    " is not a parameter of the FLUX.2 model the other shapes describe (guidance_embed ",
                    c.guidance_embed ? "true" : "false", ")");
  }
  return c;
}

}  // namespace wick::flux2
