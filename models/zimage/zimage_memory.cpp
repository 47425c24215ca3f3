// What a Z-Image training step keeps for backward, derived from models/zimage/zimage.cpp and zimage_blocks.cpp and
// the ops' saved tensors (engine/autograd/ops_*.cpp), in the notation of models/flux/flux_memory.cpp: per block R
// rows (batch x padded tokens) of width h (dim), m (SwiGLU width), H heads; e bytes per element of the compute
// dtype; norm statistics and logsumexp are f32. An RMSNorm node keeps its input and its per-row rstd when the input
// or its scale needs a gradient; mul(a, b) keeps both when either needs a gradient; a gated residual keeps its gate,
// and its branch when the gate needs a gradient; SiLU keeps its input; a Linear keeps its input when its weight trains
// (linear_activations for adapters); attention keeps q, k, v, its output and logsumexp; RoPE keeps only its tables.
#include "models/zimage/zimage_memory.h"

#include <algorithm>
#include <string>

namespace wick::zimage {
namespace {

using Count = ActivationCount;
using Stream = TokenStream;

struct Sizes {
  int64_t batch, h, m, heads, head_dim, adaln, e;
  DType dtype;
  Device device;
};

// Tokens padded as the model pads them (zimage_sequence.h): to a multiple of 32.
int64_t padded(int64_t n) { return (n + 31) / 32 * 32; }

// The block's workspace in rows of its widest tensor ([R, m] at the arithmetic's element size): the SwiGLU's
// backward, where the gradients of w1's and w3's outputs, their inputs' gradients and (with LoRA) the base and
// low-rank paths' input gradients live together. Set from the tiny Z-Image cases of
// tests/models/memory_estimate_test.cpp, where the whole step's estimate lies within -3.6% .. +7.4% of the measured
// peak (and the kept bytes are exact).
constexpr WorkspaceRows kBlockWorkspace{2.0, 1.5};

// A ZImageBlock (zimage_blocks.cpp) on `x`, modulated by the adaLN input when `modulated` (adaln_grad: that input
// needs a gradient).
Count block(const Sizes& z, Stream& x, bool modulated, bool adaln_grad, const LayerTrainingOf& of,
            const std::string& p, const ActivationShape& shape) {
  const int64_t h = z.h, m = z.m, e = z.e, rows = x.rows;
  Count c;
  bool mod_grad = false;
  if (modulated) {
    LinearActivations mod =
        linear_activations(of(p + "adaLN_modulation.0"), z.batch, z.adaln, 4 * h, z.dtype, z.device, adaln_grad);
    c.linear(mod);
    mod_grad = mod.output_requires_grad;
    c.keep(mod_grad, 2 * z.batch * h * e);  // tanh's outputs (the gates)
  }
  auto rms = [&](const std::string& name, bool input_grad, int64_t width, int64_t stat_rows) {
    const bool node = input_grad || of(p + name).trainable;
    c.keep(node, rows * width * e + 4 * stat_rows);
    return node;
  };
  // attention_norm1, then (modulated) the scale: the normed tokens kept when the scale trains, (1 + scale) when
  // the normed tokens need a gradient.
  const bool norm1 = rms("attention_norm1", x.requires_grad, h, rows);
  c.keep(mod_grad || (modulated && norm1), rows * h * e + z.batch * h * e);
  const bool in_grad = norm1 || mod_grad;
  // to_q, to_k, to_v on one input (kept once).
  bool keeps_input = false, q_grad = false, k_grad = false, v_grad = false;
  for (const char* name : {"to_q", "to_k", "to_v"}) {
    LinearActivations a = linear_activations(of(p + "attention." + name), rows, h, h, z.dtype, z.device, in_grad);
    keeps_input = keeps_input || a.keeps_input;
    c.linear(a);
    (name[3] == 'q' ? q_grad : name[3] == 'k' ? k_grad : v_grad) = a.output_requires_grad;
  }
  c.keep(keeps_input, rows * h * e);
  // The head norms keep the projections and their per-head rstd; RoPE's outputs and v are kept by attention.
  q_grad = rms("attention.norm_q", q_grad, h, rows * z.heads);
  k_grad = rms("attention.norm_k", k_grad, h, rows * z.heads);
  const bool attention_grad = q_grad || k_grad || v_grad;
  const int64_t per_sample = rows / z.batch;
  c.flops += 4 * rows * per_sample * h;
  c.keep(attention_grad, 2 * rows * h * e);  // q and k after RoPE (v is the to_v output, kept below)
  c.keep(attention_grad, rows * h * e);
  c.note(attention_transient(rows, rows, h, shape.dtype, shape.device) + rows * h * e);
  c.keep(attention_grad, rows * h * e + 4 * rows * z.heads);  // output and logsumexp
  LinearActivations out =
      linear_activations(of(p + "attention.to_out.0"), rows, h, h, z.dtype, z.device, attention_grad);
  if (attention_merge_copies(z.heads, z.head_dim, shape.dtype, shape.device, false)) {
    if (out.keeps_input)
      c.keep(true, rows * h * e);
    else
      c.hold(rows * h * e);
  } else {
    c.keep(out.keeps_input && !attention_grad, rows * h * e);
  }
  c.linear(out);
  const bool norm2 = rms("attention_norm2", out.output_requires_grad, h, rows);
  c.keep(mod_grad, rows * h * e);  // attention_norm2's output, kept by the gated residual
  const bool h_grad = x.requires_grad || mod_grad || norm2;

  // The feed-forward on ffn_norm1(h) (scaled): w1 and w3 on one input, SiLU(w1 x) · w3 x, w2.
  const bool ffn_norm1 = rms("ffn_norm1", h_grad, h, rows);
  c.keep(mod_grad || (modulated && ffn_norm1), rows * h * e + z.batch * h * e);
  const bool ffn_in_grad = ffn_norm1 || mod_grad;
  LinearActivations w1 = linear_activations(of(p + "feed_forward.w1"), rows, h, m, z.dtype, z.device, ffn_in_grad);
  LinearActivations w3 = linear_activations(of(p + "feed_forward.w3"), rows, h, m, z.dtype, z.device, ffn_in_grad);
  c.keep(w1.keeps_input || w3.keeps_input, rows * h * e);
  c.linear(w1);
  c.linear(w3);
  const bool gated_grad = w1.output_requires_grad || w3.output_requires_grad;
  c.keep(w1.output_requires_grad, rows * m * e);  // SiLU's input
  c.keep(gated_grad, 2 * rows * m * e);           // SiLU's output and w3's, kept by their product
  LinearActivations w2 = linear_activations(of(p + "feed_forward.w2"), rows, m, h, z.dtype, z.device, gated_grad);
  c.note(2 * rows * m * e);
  c.keep(w2.keeps_input, rows * m * e);
  c.linear(w2);
  const bool ffn_norm2 = rms("ffn_norm2", w2.output_requires_grad, h, rows);
  c.keep(mod_grad, rows * h * e);
  x.requires_grad = h_grad || mod_grad || ffn_norm2;
  return c;
}

}  // namespace

ActivationProfile zimage_activation_profile(const ZImageConfig& config, const ActivationShape& shape,
                                            bool checkpointing, const LayerTrainingOf& of) {
  const int64_t p = config.patch_size;
  const int64_t n_image = (shape.latent_height / p) * (shape.latent_width / p);
  const int64_t image_tokens = padded(n_image), caption_tokens = padded(shape.text_length);
  const Sizes z{.batch = shape.batch,
                .h = config.dim,
                .m = config.ffn_hidden,
                .heads = config.n_heads,
                .head_dim = config.head_dim(),
                .adaln = config.adaln_dim(),
                .e = dtype_size(shape.dtype),
                .dtype = shape.dtype,
                .device = shape.device};
  const int64_t e = z.e, h = z.h, math = math_bytes(shape.dtype, shape.device);
  ActivationProfile profile;
  profile.checkpointing = checkpointing;

  // Embedders: the t_embedder MLP on the sinusoid, the patch embedder on the patches, the caption embedder (RMSNorm
  // on the captions cast to the compute dtype, Linear); the RoPE tables are added after the blocks.
  Count embed;
  const bool adaln_grad = count_embedder_mlp(embed, of("t_embedder.mlp.0"), of("t_embedder.mlp.2"), z.batch, 256,
                                             config.t_hidden, z.dtype, z.device);
  const std::string patch = std::to_string(p) + "-1";
  LinearActivations x_in = linear_activations(of("all_x_embedder." + patch), z.batch * n_image,
                                              config.patch_features(), h, z.dtype, z.device, false);
  embed.keep(x_in.keeps_input, z.batch * n_image * config.patch_features() * e);
  embed.linear(x_in);
  const int64_t caption_rows = z.batch * shape.text_length;
  // The captions cast to the compute dtype (in f32, views of the batch's own tensor: not the step's).
  const bool cap_norm = of("cap_embedder.0").trainable;
  embed.keep(cap_norm, (e != 4 ? caption_rows * config.cap_feat_dim * e : 0) + 4 * caption_rows);
  LinearActivations cap_in = linear_activations(of("cap_embedder.1"), caption_rows, config.cap_feat_dim, h, z.dtype,
                                                z.device, cap_norm);
  embed.keep(cap_in.keeps_input, caption_rows * config.cap_feat_dim * e);
  embed.linear(cap_in);
  // c, kept by the modulation Linears that train and by the checkpoints (one tensor for every block).
  bool modulation_trains = of("all_final_layer." + patch + ".adaLN_modulation.1").trains();
  for (int64_t i = 0; i < config.n_layers; ++i)
    modulation_trains = modulation_trains || of("layers." + std::to_string(i) + ".adaLN_modulation.0").trains();
  for (int64_t i = 0; i < config.n_refiner_layers; ++i)
    modulation_trains = modulation_trains || of("noise_refiner." + std::to_string(i) + ".adaLN_modulation.0").trains();
  embed.keep(adaln_grad || checkpointing || modulation_trains, z.batch * z.adaln * e);
  profile.segments.push_back({.name = "embedders",
                              .parameter_prefixes = {"all_x_embedder.", "t_embedder.", "cap_embedder.", "x_pad_token",
                                                     "cap_pad_token"},
                              .kept = embed.internal,
                              .workspace = embed.forward_excess(),
                              .forward_flops = embed.flops});

  // A block: without checkpointing it keeps what its nodes keep; with checkpointing the checkpoint keeps its inputs
  // (when anything in or before it trains) and the recomputation keeps the internals during its own backward.
  auto add_block = [&](const std::string& name, const Count& c, bool recorded, int64_t stream_bytes,
                       int64_t widest) {
    ActivationSegment s{.name = name, .parameter_prefixes = {name + "."}, .forward_flops = c.flops};
    const double rows = c.adapted ? kBlockWorkspace.adapted : kBlockWorkspace.plain;
    s.workspace = std::max(static_cast<int64_t>(rows * static_cast<double>(widest)), c.forward_excess());
    if (checkpointing) {
      s.kept = recorded ? stream_bytes : 0;
      s.recomputed = recorded ? c.internal + 2 * stream_bytes : 0;
    } else {
      s.kept = c.input + c.internal;
    }
    profile.segments.push_back(s);
  };
  auto run_list = [&](const std::string& list, Stream& x, bool modulated) {
    for (int64_t i = 0; i < config.n_refiner_layers && list != "layers"; ++i) {
      const std::string name = list + "." + std::to_string(i);
      const bool in_grad = x.requires_grad;
      Count c = block(z, x, modulated, adaln_grad, of, name + ".", shape);
      add_block(name, c, in_grad || x.requires_grad, x.rows * h * e, x.rows * z.m * math);
    }
  };
  Stream image{z.batch * image_tokens, x_in.output_requires_grad};
  Stream caption{z.batch * caption_tokens, cap_in.output_requires_grad};
  // The RoPE tables of each padded batch (cos and sin, f32), kept by its RoPE nodes when its blocks record any.
  auto rope_tables = [&](int64_t tokens) { return 2 * z.batch * tokens * (z.head_dim / 2) * 4; };
  run_list("noise_refiner", image, true);
  if (image.requires_grad) profile.segments.front().kept += rope_tables(image_tokens);
  run_list("context_refiner", caption, false);
  if (caption.requires_grad) profile.segments.front().kept += rope_tables(caption_tokens);
  Stream x{z.batch * (image_tokens + caption_tokens), image.requires_grad || caption.requires_grad};
  for (int64_t i = 0; i < config.n_layers; ++i) {
    const std::string name = "layers." + std::to_string(i);
    const bool in_grad = x.requires_grad;
    Count c = block(z, x, true, adaln_grad, of, name + ".", shape);
    add_block(name, c, in_grad || x.requires_grad, x.rows * h * e, x.rows * z.m * math);
  }
  if (x.requires_grad) profile.segments.front().kept += rope_tables(image_tokens + caption_tokens);

  // The final layer on every unified token (the image tokens are taken after it): SiLU and the adaLN Linear, the
  // LayerNorm, the scale, the Linear; then the loss keeps pred - target in f32. For a moment: the
  // unpatchified output, its negation, its f32 copy and the squared error.
  Count final_layer;
  final_layer.keep(adaln_grad, z.batch * z.adaln * e);
  LinearActivations ada = linear_activations(of("all_final_layer." + patch + ".adaLN_modulation.1"), z.batch, z.adaln,
                                             h, z.dtype, z.device, adaln_grad);
  final_layer.linear(ada);
  final_layer.keep(x.requires_grad, x.rows * h * e + 2 * 4 * x.rows);  // the LayerNorm's input and statistics
  // The LayerNorm's output and (1 + scale), kept by their product.
  final_layer.keep(x.requires_grad || ada.output_requires_grad, x.rows * h * e + z.batch * h * e);
  LinearActivations linear = linear_activations(of("all_final_layer." + patch + ".linear"), x.rows, h,
                                                config.patch_features(), z.dtype, z.device,
                                                x.requires_grad || ada.output_requires_grad);
  final_layer.keep(linear.keeps_input, x.rows * h * e);
  final_layer.linear(linear);
  const int64_t prediction = z.batch * n_image * config.patch_features();
  final_layer.internal += 4 * prediction;  // pred - target
  const int64_t moment = prediction * (3 * e + (e != 4 ? 4 : 0) + 4) + 2 * x.rows * h * e;
  profile.segments.push_back({.name = "final_layer",
                              .parameter_prefixes = {"all_final_layer."},
                              .kept = final_layer.internal,
                              .workspace = std::max(moment, final_layer.forward_excess()),
                              .forward_flops = final_layer.flops});
  return profile;
}

MemoryEstimate estimate_zimage_memory(const ZImageConfig& config, const TrainingPlan& plan, const MemoryInputs& in) {
  return estimate_planned_memory(
      {.shapes = parameter_shapes(config), .dtype = config.dtype, .block_paths = block_paths(config)}, plan,
      [&](const ActivationShape& shape, bool checkpointing, const LayerTrainingOf& training) {
        return zimage_activation_profile(config, shape, checkpointing, training);
      },
      in);
}

}  // namespace wick::zimage
