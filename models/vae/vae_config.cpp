#include "models/vae/vae_config.h"

#include <algorithm>

#include "engine/autograd/grad_mode.h"
#include "engine/autograd/ops_elementwise.h"
#include "engine/autograd/ops_layout.h"
#include "runtime/error.h"

namespace wick::vae {
namespace {

void check_floating(const Tensor& t, const char* what) {
  WICK_CHECK(t.defined() && is_floating(t.dtype()), what, ": expected floating latents, got ",
             t.defined() ? t.describe() : std::string("an undefined tensor"));
}

}  // namespace

Tensor normalize_latents(const Tensor& z, const LatentNormalization& n) {
  check_floating(z, "normalize_latents");
  autograd::NoGradGuard no_grad;
  return autograd::to_dtype((autograd::to_dtype(z, DType::F32) - n.shift_factor) * n.scaling_factor, z.dtype());
}

Tensor denormalize_latents(const Tensor& latents, const LatentNormalization& n) {
  check_floating(latents, "denormalize_latents");
  WICK_CHECK(n.scaling_factor != 0.0, "denormalize_latents: scaling_factor is 0");
  autograd::NoGradGuard no_grad;
  return autograd::to_dtype(autograd::to_dtype(latents, DType::F32) / n.scaling_factor + n.shift_factor,
                            latents.dtype());
}

void validate(const VaeConfig& c) {
  auto positive = [](int64_t value, const char* field) {
    WICK_CHECK_KIND(Config, value > 0, "VAE config: ", field, " must be positive, got ", value);
  };
  positive(c.in_channels, "in_channels");
  positive(c.out_channels, "out_channels");
  positive(c.encoder_blocks, "encoder_blocks");
  positive(c.decoder_blocks, "decoder_blocks");
  positive(c.z_channels, "z_channels");
  positive(c.norm_groups, "norm_groups");
  WICK_CHECK_KIND(Config, !c.block_channels.empty() && c.block_channels.size() <= 16,
                  "VAE config: block_channels must list 1 to 16 levels, got ", c.block_channels.size());
  for (size_t i = 0; i < c.block_channels.size(); ++i) {
    const int64_t channels = c.block_channels[i];
    WICK_CHECK_KIND(Config, channels > 0 && channels % c.norm_groups == 0, "VAE config: level ", i, " has ", channels,
                    " channels, which do not split into norm_groups = ", c.norm_groups,
                    " GroupNorm groups (real VAEs: 32; a diffusers config.json gives norm_num_groups)");
  }
  WICK_CHECK_KIND(Config, c.norm_eps > 0, "VAE config: norm_eps must be positive");
  WICK_CHECK_KIND(Config, c.attention_query_chunk >= 0,
                  "VAE config: attention_query_chunk must be >= 0 (0: automatic), got ", c.attention_query_chunk);
  WICK_CHECK_KIND(Config, c.normalization.scaling_factor != 0.0, "VAE config: scaling_factor must not be 0");
  WICK_CHECK_KIND(Config, c.latent_patch >= 0 && c.latent_patch <= 16,
                  "VAE config: latent_patch must be 0 (no latent BatchNorm) to 16, got ", c.latent_patch);
  WICK_CHECK_KIND(Config, c.batch_norm_eps > 0, "VAE config: batch_norm_eps must be positive, got ", c.batch_norm_eps);
  WICK_CHECK_KIND(Config,
                  c.dtype == DType::F32 || c.dtype == DType::BF16 || c.dtype == DType::F16 || c.dtype == DType::F64,
                  "VAE config: dtype must be floating, got ", dtype_name(c.dtype));
}

VaeConfig ldm_vae_config(int64_t z_channels, bool quant_convs) {
  VaeConfig c;
  c.z_channels = z_channels;
  c.quant_conv = c.post_quant_conv = quant_convs;
  return c;
}

std::map<std::string, Shape> parameter_shapes(const VaeConfig& c) {
  std::map<std::string, Shape> out;
  auto conv = [&](const std::string& name, int64_t in, int64_t o, int64_t k) {
    out[name + ".weight"] = {o, in, k, k};
    out[name + ".bias"] = {o};
  };
  auto norm = [&](const std::string& name, int64_t channels) {
    out[name + ".weight"] = {channels};
    out[name + ".bias"] = {channels};
  };
  auto resnet = [&](const std::string& name, int64_t in, int64_t o) {
    norm(name + ".norm1", in);
    conv(name + ".conv1", in, o, 3);
    norm(name + ".norm2", o);
    conv(name + ".conv2", o, o, 3);
    if (in != o) conv(name + ".nin_shortcut", in, o, 1);
  };
  auto mid = [&](const std::string& name, int64_t channels) {
    resnet(name + ".block_1", channels, channels);
    if (c.mid_attention) {
      norm(name + ".attn_1.norm", channels);
      for (const char* projection : {"q", "k", "v", "proj_out"})
        conv(name + ".attn_1." + projection, channels, channels, 1);
    }
    resnet(name + ".block_2", channels, channels);
  };
  const int64_t n = c.n_levels();
  const std::vector<int64_t>& ch = c.block_channels;
  conv("encoder.conv_in", c.in_channels, ch[0], 3);
  for (int64_t i = 0; i < n; ++i) {
    const std::string level = "encoder.down." + std::to_string(i);
    for (int64_t j = 0; j < c.encoder_blocks; ++j)
      resnet(level + ".block." + std::to_string(j),
             j == 0 ? ch[static_cast<size_t>(std::max<int64_t>(i - 1, 0))] : ch[static_cast<size_t>(i)],
             ch[static_cast<size_t>(i)]);
    if (i + 1 < n) conv(level + ".downsample.conv", ch[static_cast<size_t>(i)], ch[static_cast<size_t>(i)], 3);
  }
  mid("encoder.mid", ch.back());
  norm("encoder.norm_out", ch.back());
  conv("encoder.conv_out", ch.back(), 2 * c.z_channels, 3);
  if (c.quant_conv) conv("quant_conv", 2 * c.z_channels, 2 * c.z_channels, 1);
  if (c.post_quant_conv) conv("post_quant_conv", c.z_channels, c.z_channels, 1);
  conv("decoder.conv_in", c.z_channels, ch.back(), 3);
  mid("decoder.mid", ch.back());
  for (int64_t i = n - 1; i >= 0; --i) {
    const std::string level = "decoder.up." + std::to_string(i);
    for (int64_t j = 0; j < c.decoder_blocks; ++j)
      resnet(level + ".block." + std::to_string(j),
             j == 0 ? ch[static_cast<size_t>(std::min<int64_t>(i + 1, n - 1))] : ch[static_cast<size_t>(i)],
             ch[static_cast<size_t>(i)]);
    if (i > 0) conv(level + ".upsample.conv", ch[static_cast<size_t>(i)], ch[static_cast<size_t>(i)], 3);
  }
  norm("decoder.norm_out", ch[0]);
  conv("decoder.conv_out", ch[0], c.out_channels, 3);
  if (c.latent_patch > 0) {
    const int64_t channels = c.latent_patch * c.latent_patch * c.z_channels;
    out["bn.running_mean"] = {channels};
    out["bn.running_var"] = {channels};
  }
  return out;
}

}  // namespace wick::vae
