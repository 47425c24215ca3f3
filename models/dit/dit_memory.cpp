// What a DiT training step keeps for backward, derived from models/dit/dit.cpp, models/nn
// (MultiHeadAttention, MLP, LayerNorm) and the ops' saved tensors. Notation and rules as in
// models/flux/flux_memory.cpp: N image rows and J = N + text rows (batch x tokens), widths h and m,
// H heads, e bytes per element of the compute dtype; "kept iff" names when the keeping node exists.
#include "models/dit/dit_memory.h"

#include <algorithm>

namespace wick {
namespace {

// The workspace of a block, in rows of its widest tensor at the arithmetic's element size (as
// Flux's, models/flux/flux_memory.cpp), measured by tracing every backward node: the MLP's input
// gradients, with LoRA the base and low-rank paths' and their sum (1.96 rows measured), without
// adapters one gradient and the weight's (1.13 rows).
constexpr double kWorkspaceRowsAdapted = 2.0, kWorkspaceRowsPlain = 1.15;

using Count = ActivationCount;

// EmbedMLP (linear_1 -> SiLU -> linear_2) on [B, in]; returns whether its output requires a gradient.
bool embed_mlp(int64_t batch, int64_t in, int64_t h, const ActivationShape& shape, const LayerTrainingOf& of,
               const std::string& p, Count& c) {
  const int64_t e = dtype_size(shape.dtype);
  LinearActivations a = linear_activations(of(p + ".linear_1"), batch, in, h, shape.dtype, shape.device, false);
  c.keep(a.keeps_input && e != 4, batch * in * e);  // f32 features are the caller's own tensor
  c.linear(a);
  c.keep(a.output_requires_grad, batch * h * e);  // kept by SiLU
  LinearActivations b =
      linear_activations(of(p + ".linear_2"), batch, h, h, shape.dtype, shape.device, a.output_requires_grad);
  c.keep(b.keeps_input, batch * h * e);
  c.linear(b);
  return b.output_requires_grad;
}

}  // namespace

ActivationProfile dit_activation_profile(const DiTConfig& config, const ActivationShape& shape, bool checkpointing,
                                         const LayerTrainingOf& of) {
  const int64_t batch = shape.batch, e = dtype_size(shape.dtype), h = config.hidden_size;
  const int64_t m = static_cast<int64_t>(static_cast<double>(h) * config.mlp_ratio);
  const int64_t grid = config.input_size / config.patch_size;
  const int64_t n = batch * grid * grid, text = batch * shape.text_length, joint = n + text;
  const int64_t heads = config.num_heads;
  ActivationProfile profile;
  profile.checkpointing = checkpointing;

  // Embedders: the patches (kept by x_embedder when it trains), the timestep and pooled MLPs into
  // cond, context_embedder on the text (cast to the compute dtype), the key mask (u8, kept by every
  // attention node). The text stream [text, h] is kept by every checkpoint; without checkpointing
  // nothing keeps it, but it lives until the forward returns: counted here either way.
  Count embed;
  const int64_t patch_features = config.in_channels * config.patch_size * config.patch_size;
  LinearActivations x_embed =
      linear_activations(of("x_embedder.proj"), n, patch_features, h, shape.dtype, shape.device, false);
  embed.keep(x_embed.keeps_input, n * patch_features * e);
  embed.linear(x_embed);
  bool cond_grad = embed_mlp(batch, config.frequency_dim, h, shape, of, "t_embedder", embed);
  if (config.pooled_dim > 0)
    cond_grad = embed_mlp(batch, config.pooled_dim, h, shape, of, "y_embedder", embed) || cond_grad;
  LinearActivations context =
      linear_activations(of("context_embedder"), text, config.text_dim, h, shape.dtype, shape.device, false);
  embed.keep(context.keeps_input && e != 4, text * config.text_dim * e);
  embed.linear(context);
  const bool text_grad = context.output_requires_grad;
  embed.internal += text * h * e + joint;  // the text stream, the key mask
  profile.segments.push_back(
      {.name = "embedders",
       .parameter_prefixes = {"x_embedder.", "t_embedder.", "y_embedder.", "context_embedder.", "pos_embed"},
       .kept = embed.internal,
       .workspace = embed.forward_excess()});

  bool x_grad = x_embed.output_requires_grad || of("").trainable;  // pos_embed is the model's own parameter
  for (int64_t i = 0; i < config.depth; ++i) {
    const std::string name = "blocks." + std::to_string(i), p = name + ".";
    Count c;
    LinearActivations ada =
        linear_activations(of(p + "adaLN_modulation.1"), batch, h, 6 * h, shape.dtype, shape.device, cond_grad);
    c.keep(ada.keeps_input, batch * h * e);  // SiLU(cond)
    c.linear(ada);
    const bool mod_grad = ada.output_requires_grad;
    if (x_grad) c.input += n * h * e;  // kept by norm1
    c.keep(x_grad, 2 * 4 * n);
    c.keep(mod_grad, n * h * e);  // norm1's output, kept by modulate (scale trains)
    const bool h_grad = x_grad || mod_grad;
    LinearActivations q = linear_activations(of(p + "attn.q"), n, h, h, shape.dtype, shape.device, h_grad);
    c.keep(q.keeps_input, n * h * e);
    c.linear(q);
    // kv reads [modulated image tokens; text], a copy made by the concat.
    LinearActivations kv =
        linear_activations(of(p + "attn.kv"), joint, h, 2 * h, shape.dtype, shape.device, h_grad || text_grad);
    if (kv.keeps_input)
      c.keep(true, joint * h * e);
    else
      c.hold(joint * h * e);  // the block's local until it returns
    c.linear(kv);
    // Attention keeps q (a view of q's output), k and v (views of kv's output), its output, logsumexp.
    const bool attention_grad = q.output_requires_grad || kv.output_requires_grad;
    c.keep(attention_grad, n * h * e + joint * 2 * h * e);
    c.note(attention_transient(n, joint, h, shape.dtype, shape.device) + n * h * e);
    c.keep(attention_grad, n * h * e + 4 * n * heads);
    LinearActivations proj =
        linear_activations(of(p + "attn.proj"), n, h, h, shape.dtype, shape.device, attention_grad);
    // The output [B, H, N, D] read as [B, N, h]: a copy (kept by a proj that trains, else freed
    // once proj ran) or a view of the output (the mask rules cuDNN out on CUDA).
    if (attention_merge_copies(heads, h / heads, shape.dtype, shape.device, true)) {
      c.keep(proj.keeps_input, n * h * e);
      if (!proj.keeps_input) c.note(n * h * e);
    } else {
      c.keep(proj.keeps_input && !attention_grad, n * h * e);
    }
    c.linear(proj);
    c.keep(mod_grad, n * h * e);  // attention branch, kept by the gated residual (gate trains)
    const bool x1_grad = x_grad || mod_grad || proj.output_requires_grad;
    c.keep(x1_grad, n * h * e + 2 * 4 * n);  // kept by norm2 with its statistics
    c.keep(mod_grad, n * h * e);             // norm2's output
    LinearActivations fc1 =
        linear_activations(of(p + "mlp.fc1"), n, h, m, shape.dtype, shape.device, x1_grad || mod_grad);
    c.keep(fc1.keeps_input, n * h * e);
    c.linear(fc1);
    c.keep(fc1.output_requires_grad, n * m * e);  // kept by GELU
    c.note(n * m * e);                            // GELU's output
    LinearActivations fc2 =
        linear_activations(of(p + "mlp.fc2"), n, m, h, shape.dtype, shape.device, fc1.output_requires_grad);
    c.keep(fc2.keeps_input, n * m * e);
    c.linear(fc2);
    c.keep(mod_grad, n * h * e);                                      // MLP branch
    c.keep(x_grad || mod_grad || attention_grad, batch * 6 * h * e);  // the modulation
    x_grad = x1_grad || fc2.output_requires_grad;

    ActivationSegment s{.name = name, .parameter_prefixes = {p}};
    const int64_t widest = std::max(joint * 2 * h, n * m) * math_bytes(shape.dtype, shape.device);
    const double rows = c.adapted ? kWorkspaceRowsAdapted : kWorkspaceRowsPlain;
    s.workspace = std::max(static_cast<int64_t>(rows * static_cast<double>(widest)), c.forward_excess());
    if (checkpointing) {
      s.kept = n * h * e;                         // the tokens; text and cond are the embedders'
      s.recomputed = c.internal + 2 * n * h * e;  // and the outputs again, with their gradients
    } else {
      s.kept = c.input + c.internal;
    }
    profile.segments.push_back(s);
  }

  // Final layer: norm_final keeps the tokens and statistics, adaLN, modulate, linear; unpatchify;
  // the loss keeps pred - target in f32. For a moment: the prediction, its f32 copy, the squared error.
  Count final_layer;
  LinearActivations ada =
      linear_activations(of("final_layer.adaLN_modulation.1"), batch, h, 2 * h, shape.dtype, shape.device, cond_grad);
  final_layer.keep(ada.keeps_input, batch * h * e);
  final_layer.linear(ada);
  final_layer.keep(x_grad, n * h * e + 2 * 4 * n);
  final_layer.keep(x_grad || ada.output_requires_grad, batch * 2 * h * e);
  final_layer.keep(ada.output_requires_grad, n * h * e);
  const int64_t out_features =
      config.patch_size * config.patch_size * (config.learn_sigma ? 2 * config.in_channels : config.in_channels);
  LinearActivations linear = linear_activations(of("final_layer.linear"), n, h, out_features, shape.dtype, shape.device,
                                                x_grad || ada.output_requires_grad);
  final_layer.keep(linear.keeps_input, n * h * e);
  final_layer.linear(linear);
  const int64_t prediction = n * out_features;
  final_layer.internal += 4 * prediction;
  const int64_t moment = prediction * (e + (e != 4 ? 4 : 0) + 4) + 2 * n * h * e;
  profile.segments.push_back({.name = "final_layer",
                              .parameter_prefixes = {"final_layer."},
                              .kept = final_layer.internal,
                              .workspace = std::max(moment, final_layer.forward_excess())});
  return profile;
}

}  // namespace wick
