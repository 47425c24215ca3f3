#include "models/sdxl/sdxl_config.h"

#include "models/weights/key_map.h"
#include "runtime/error.h"
#include "runtime/shape.h"

namespace wick::sdxl {
namespace {


// The parameter table being built: a helper per layer kind, in LDM's names.
struct Shapes {
  std::map<std::string, Shape>& out;
  void conv(const std::string& name, int64_t in, int64_t out_channels, int64_t kernel) {
    out[name + ".weight"] = {out_channels, in, kernel, kernel};
    out[name + ".bias"] = {out_channels};
  }
  void linear(const std::string& name, int64_t in, int64_t out_features, bool bias = true) {
    out[name + ".weight"] = {out_features, in};
    if (bias) out[name + ".bias"] = {out_features};
  }
  void norm(const std::string& name, int64_t channels) {
    out[name + ".weight"] = {channels};
    out[name + ".bias"] = {channels};
  }
  void resnet(const std::string& p, int64_t in, int64_t out_channels, int64_t time_embed_dim) {
    norm(p + ".in_layers.0", in);
    conv(p + ".in_layers.2", in, out_channels, 3);
    linear(p + ".emb_layers.1", time_embed_dim, out_channels);
    norm(p + ".out_layers.0", out_channels);
    conv(p + ".out_layers.3", out_channels, out_channels, 3);
    if (in != out_channels) conv(p + ".skip_connection", in, out_channels, 1);
  }
  void transformer(const UnetConfig& c, const std::string& p, int64_t channels, int64_t depth) {
    norm(p + ".norm", channels);
    auto projection = [&](const std::string& name) {
      if (c.linear_projection)
        linear(name, channels, channels);
      else
        conv(name, channels, channels, 1);
    };
    projection(p + ".proj_in");
    for (int64_t k = 0; k < depth; ++k) {
      const std::string b = p + ".transformer_blocks." + std::to_string(k);
      for (const char* n : {".norm1", ".norm2", ".norm3"}) norm(b + n, channels);
      for (const char* a : {".attn1", ".attn2"}) {
        const int64_t kv_in = std::string(a) == ".attn1" ? channels : c.context_dim;
        linear(b + a + ".to_q", channels, channels, false);
        linear(b + a + ".to_k", kv_in, channels, false);
        linear(b + a + ".to_v", kv_in, channels, false);
        linear(b + a + ".to_out.0", channels, channels);
      }
      linear(b + ".ff.net.0.proj", channels, 8 * channels);
      linear(b + ".ff.net.2", 4 * channels, channels);
    }
    projection(p + ".proj_out");
  }
};

// Hints for the two common reasons an LDM name is absent: a checkpoint prefix, or diffusers' names.
std::string format_hint(const std::map<std::string, Shape>& shapes) {
  for (const auto& [name, shape] : shapes) {
    if (name.rfind("model.diffusion_model.", 0) == 0)
      return " (the names start with 'model.diffusion_model.': strip that prefix)";
    if (name.rfind("down_blocks.", 0) == 0)
      return " (the names are diffusers', e.g. '" + name + "'; map them to LDM's first)";
  }
  return " (expected LDM names, e.g. input_blocks.0.0.weight)";
}

const Shape& require(const std::map<std::string, Shape>& shapes, const std::string& name, size_t rank,
                     const char* what) {
  auto it = shapes.find(name);
  WICK_CHECK_KIND(Data, it != shapes.end(), "SDXL UNet config: tensor '", name, "' is missing (it gives ", what, ")",
                  format_hint(shapes));
  WICK_CHECK_KIND(Data, it->second.size() == rank && numel(it->second) > 0, "SDXL UNet config: tensor '", name,
                  "' has shape ", it->second, ", expected a non-empty ", rank, "-d tensor (it gives ", what, ")");
  return it->second;
}

bool ldm_name(const std::string& name) {
  static const char* kPrefixes[] = {"input_blocks.", "middle_block.", "output_blocks.", "time_embed.", "label_emb.",
                                    "out."};
  for (const char* prefix : kPrefixes)
    if (name.rfind(prefix, 0) == 0) return true;
  return false;
}

int64_t transformer_depth_at(const std::vector<std::string>& names, const std::string& block) {
  return count_blocks(names, block + ".1.transformer_blocks.");
}

}  // namespace

UnetConfig UnetConfig::sdxl_base() { return UnetConfig{}; }

void validate(const UnetConfig& c) {
  WICK_CHECK_KIND(Config, c.in_channels > 0 && c.out_channels > 0 && c.model_channels > 0, "SDXL UNet: in_channels ",
                  c.in_channels, ", out_channels ", c.out_channels, " and model_channels ", c.model_channels,
                  " must be positive");
  WICK_CHECK_KIND(Config, !c.channel_mult.empty() && c.transformer_depth.size() == c.channel_mult.size(),
                  "SDXL UNet: channel_mult ", shape_string(c.channel_mult), " and transformer_depth ",
                  shape_string(c.transformer_depth), " must name the same levels (at least one)");
  WICK_CHECK_KIND(Config, c.num_res_blocks > 0 && c.time_embed_dim > 0 && c.context_dim > 0,
                  "SDXL UNet: num_res_blocks ", c.num_res_blocks, ", time_embed_dim ", c.time_embed_dim,
                  " and context_dim ", c.context_dim, " must be positive");
  WICK_CHECK_KIND(Config, c.transformer_depth_middle > 0, "SDXL UNet: the middle block needs a transformer (depth ",
                  c.transformer_depth_middle, ")");
  WICK_CHECK_KIND(Config, c.norm_groups > 0 && c.model_channels % c.norm_groups == 0, "SDXL UNet: ", c.model_channels,
                  " channels do not split into ", c.norm_groups, " GroupNorm groups (model.norm_groups)");
  WICK_CHECK_KIND(Config, c.num_heads > 0 || c.head_dim > 0, "SDXL UNet: neither a head count nor a head width");
  for (int64_t level = 0; level < c.n_levels(); ++level) {
    WICK_CHECK_KIND(Config, c.channel_mult[static_cast<size_t>(level)] > 0 && c.transformer_depth[level] >= 0,
                    "SDXL UNet: level ", level, " has channel_mult ", c.channel_mult[static_cast<size_t>(level)],
                    " and transformer depth ", c.transformer_depth[static_cast<size_t>(level)]);
    const int64_t ch = c.level_channels(level);
    WICK_CHECK_KIND(Config, ch % c.norm_groups == 0, "SDXL UNet: level ", level, "'s ", ch,
                    " channels do not split into ", c.norm_groups, " GroupNorm groups");
    if (c.attention(level) || level == c.n_levels() - 1)
      WICK_CHECK_KIND(Config, c.heads(ch) > 0 && c.heads(ch) * c.head_width(ch) == ch, "SDXL UNet: level ", level,
                      "'s ", ch, " channels do not split into ",
                      c.num_heads > 0 ? std::to_string(c.num_heads) + " heads"
                                      : "heads of " + std::to_string(c.head_dim) + " (model.head_dim)");
  }
  WICK_CHECK_KIND(Config, c.adm_in_channels == 0 || (c.size_embed_dim > 0 && c.size_embed_dim % 2 == 0 &&
                                                      c.pooled_dim() > 0),
                  "SDXL UNet: label_emb's input of ", c.adm_in_channels, " is not a pooled vector + 6 sinusoids of ",
                  c.size_embed_dim, " (model.addition_time_embed_dim, even)");
  WICK_CHECK_KIND(Config, c.model_channels % 2 == 0, "SDXL UNet: the timestep sinusoid's width model_channels ",
                  c.model_channels, " must be even");
}

int64_t input_block_index(const UnetConfig& c, int64_t level, int64_t res) {
  return 1 + level * (c.num_res_blocks + 1) + res;
}

int64_t downsample_index(const UnetConfig& c, int64_t level) { return input_block_index(c, level, c.num_res_blocks); }

int64_t output_block_index(const UnetConfig& c, int64_t level, int64_t res) {
  return (c.n_levels() - 1 - level) * (c.num_res_blocks + 1) + res;
}

std::string upsample_path(const UnetConfig& c, int64_t level) {
  return "output_blocks." + std::to_string(output_block_index(c, level, c.num_res_blocks)) +
         (c.attention(level) ? ".2.conv" : ".1.conv");
}

std::vector<std::string> block_paths(const UnetConfig& c) {
  std::vector<std::string> paths;
  const int64_t n_input = input_block_index(c, c.n_levels() - 1, c.num_res_blocks);  // the last level has no
                                                                                      // downsampler
  for (int64_t i = 0; i < n_input; ++i) paths.push_back("input_blocks." + std::to_string(i));
  paths.push_back("middle_block");
  for (int64_t i = 0; i < c.n_levels() * (c.num_res_blocks + 1); ++i)
    paths.push_back("output_blocks." + std::to_string(i));
  return paths;
}

std::map<std::string, Shape> parameter_shapes(const UnetConfig& c) {
  std::map<std::string, Shape> table;
  Shapes s{table};
  const int64_t ted = c.time_embed_dim;
  s.linear("time_embed.0", c.model_channels, ted);
  s.linear("time_embed.2", ted, ted);
  if (c.adm_in_channels > 0) {
    s.linear("label_emb.0.0", c.adm_in_channels, ted);
    s.linear("label_emb.0.2", ted, ted);
  }
  s.conv("input_blocks.0.0", c.in_channels, c.model_channels, 3);
  std::vector<int64_t> skips = {c.model_channels};
  int64_t ch = c.model_channels;
  for (int64_t level = 0; level < c.n_levels(); ++level) {
    for (int64_t j = 0; j < c.num_res_blocks; ++j) {
      const std::string block = "input_blocks." + std::to_string(input_block_index(c, level, j));
      s.resnet(block + ".0", ch, c.level_channels(level), ted);
      ch = c.level_channels(level);
      if (c.attention(level)) s.transformer(c, block + ".1", ch, c.transformer_depth[static_cast<size_t>(level)]);
      skips.push_back(ch);
    }
    if (level < c.n_levels() - 1) {
      s.conv("input_blocks." + std::to_string(downsample_index(c, level)) + ".0.op", ch, ch, 3);
      skips.push_back(ch);
    }
  }
  s.resnet("middle_block.0", ch, ch, ted);
  s.transformer(c, "middle_block.1", ch, c.transformer_depth_middle);
  s.resnet("middle_block.2", ch, ch, ted);
  for (int64_t level = c.n_levels() - 1; level >= 0; --level) {
    for (int64_t j = 0; j <= c.num_res_blocks; ++j) {
      const std::string block = "output_blocks." + std::to_string(output_block_index(c, level, j));
      const int64_t skip = skips.back();
      skips.pop_back();
      s.resnet(block + ".0", ch + skip, c.level_channels(level), ted);
      ch = c.level_channels(level);
      if (c.attention(level)) s.transformer(c, block + ".1", ch, c.transformer_depth[static_cast<size_t>(level)]);
      if (level > 0 && j == c.num_res_blocks) s.conv(upsample_path(c, level), ch, ch, 3);
    }
  }
  s.norm("out.0", c.model_channels);
  s.conv("out.2", c.model_channels, c.out_channels, 3);
  return table;
}

UnetConfig config_from_shapes(const std::map<std::string, Shape>& shapes, const ConfigHints& hints) {
  UnetConfig c;
  std::vector<std::string> names;
  for (const auto& [name, shape] : shapes) names.push_back(name);
  const Shape& conv_in = require(shapes, "input_blocks.0.0.weight", 4, "the latent channels and model_channels");
  c.model_channels = conv_in[0];
  c.in_channels = conv_in[1];
  c.out_channels = require(shapes, "out.2.weight", 4, "the output channels")[0];
  c.time_embed_dim = require(shapes, "time_embed.0.weight", 2, "the time embedding's width")[0];
  auto label = shapes.find("label_emb.0.0.weight");
  c.adm_in_channels = label == shapes.end() ? 0 : require(shapes, "label_emb.0.0.weight", 2, "the added input")[1];

  // The input blocks, level by level: resnets (with a transformer after each, or none), closed by a downsampler.
  c.channel_mult.clear();
  c.transformer_depth.clear();
  const int64_t n_input = count_blocks(names, "input_blocks.");
  int64_t res_in_level = 0, level_width = 0, level_depth = -1;
  c.num_res_blocks = 0;
  auto close_level = [&](int64_t index) {
    WICK_CHECK_KIND(Data, res_in_level > 0, "SDXL UNet config: input_blocks.", index,
                    " closes a level without resnets");
    WICK_CHECK_KIND(Data, c.num_res_blocks == 0 || c.num_res_blocks == res_in_level, "SDXL UNet config: level ",
                    c.channel_mult.size(), " has ", res_in_level, " resnets, level 0 has ", c.num_res_blocks,
                    " (a different count per level is not supported)");
    WICK_CHECK_KIND(Data, level_width % c.model_channels == 0, "SDXL UNet config: level ", c.channel_mult.size(),
                    " is ", level_width, " channels wide, not a multiple of model_channels ", c.model_channels);
    c.num_res_blocks = res_in_level;
    c.channel_mult.push_back(level_width / c.model_channels);
    c.transformer_depth.push_back(level_depth);
    res_in_level = 0;
    level_depth = -1;
  };
  for (int64_t i = 1; i < n_input; ++i) {
    const std::string block = "input_blocks." + std::to_string(i);
    if (shapes.count(block + ".0.op.weight")) {
      close_level(i);
      continue;
    }
    level_width = require(shapes, block + ".0.out_layers.3.weight", 4, "a resnet's width")[0];
    const int64_t depth = transformer_depth_at(names, block);
    WICK_CHECK_KIND(Data, level_depth < 0 || level_depth == depth, "SDXL UNet config: ", block, " has ", depth,
                    " transformer blocks, the level's first resnet ", level_depth);
    level_depth = depth;
    ++res_in_level;
  }
  close_level(n_input);
  c.transformer_depth_middle = count_blocks(names, "middle_block.1.transformer_blocks.");
  // The first transformer tells the projections' kind and the context width.
  std::string first = "middle_block.1";
  for (int64_t level = 0; level < c.n_levels(); ++level)
    if (c.attention(level)) {
      first = "input_blocks." + std::to_string(input_block_index(c, level, 0)) + ".1";
      break;
    }
  const auto proj_in = shapes.find(first + ".proj_in.weight");
  WICK_CHECK_KIND(Data, proj_in != shapes.end() && (proj_in->second.size() == 2 || proj_in->second.size() == 4),
                  "SDXL UNet config: tensor '", first, ".proj_in.weight' is missing or neither a Linear nor a 1x1 "
                  "convolution", format_hint(shapes));
  c.linear_projection = proj_in->second.size() == 2;
  c.context_dim = require(shapes, first + ".transformer_blocks.0.attn2.to_k.weight", 2, "the context width")[1];
  if (hints.num_heads > 0) {
    c.num_heads = hints.num_heads;
    c.head_dim = 0;
  } else if (hints.head_dim > 0) {
    c.head_dim = hints.head_dim;
  }
  if (hints.norm_groups > 0) c.norm_groups = hints.norm_groups;
  if (hints.size_embed_dim > 0) c.size_embed_dim = hints.size_embed_dim;
  validate(c);

  // Every parameter of that UNet, with its shape; and no LDM-named tensor left over.
  const std::map<std::string, Shape> expected = parameter_shapes(c);
  const std::string described = std::to_string(c.model_channels) + " x " + shape_string(c.channel_mult) + ", " +
                                std::to_string(c.num_res_blocks) + " resnets per level, transformer depth " +
                                shape_string(c.transformer_depth) + " and " + std::to_string(c.transformer_depth_middle) +
                                " in the middle";
  for (const auto& [name, shape] : expected) {
    auto it = shapes.find(name);
    WICK_CHECK_KIND(Data, it != shapes.end(), "SDXL UNet config: tensor '", name, "' is missing (expected shape ",
                    shape, " for ", described, ")");
    WICK_CHECK_KIND(Data, it->second == shape, "SDXL UNet config: tensor '", name, "' has shape ", it->second, " but ",
                    described, ", context ", c.context_dim, ", time embedding ", c.time_embed_dim, " require ", shape,
                    name.find(".proj_") != std::string::npos ? " (a 1x1-conv projection is [C, C, 1, 1], a Linear one "
                                                               "[C, C]; every transformer has the same kind)"
                                                             : "");
  }
  for (const auto& [name, shape] : shapes)
    WICK_CHECK_KIND(Data, !ldm_name(name) || expected.count(name), "SDXL UNet config: tensor '", name, "' ", shape,
                    " is not a parameter of the UNet the other shapes describe (", described, ")");
  return c;
}

std::string variant_name(const UnetConfig& c) {
  const bool sd_widths = c.model_channels == 320 && c.num_res_blocks == 2;
  if (sd_widths && c.channel_mult == std::vector<int64_t>{1, 2, 4} &&
      c.transformer_depth == std::vector<int64_t>{0, 2, 10} && c.transformer_depth_middle == 10 &&
      c.context_dim == 2048 && c.adm_in_channels == 2816)
    return "SDXL base";
  if (sd_widths && c.channel_mult == std::vector<int64_t>{1, 2, 4, 4} &&
      c.transformer_depth == std::vector<int64_t>{1, 1, 1, 0} && c.adm_in_channels == 0) {
    if (c.context_dim == 768 && !c.linear_projection) return "SD 1.x UNet";
    if (c.context_dim == 1024) return "SD 2.x UNet";
  }
  return c.adm_in_channels > 0 ? "SDXL-like UNet" : "UNet";
}

}  // namespace wick::sdxl
