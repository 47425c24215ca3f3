// What an SD3 training step keeps for backward, derived from models/sd3/sd3.cpp and sd3_blocks.cpp and
// the ops' saved tensors (engine/autograd/ops_*.cpp), in the notation of models/flux/flux_memory.cpp:
// per block R rows (batch x tokens) of width h (hidden), m (MLP), H heads; e bytes per element of the
// compute dtype; statistics and logsumexp are f32. A node exists only when one of its inputs requires a
// gradient; a LayerNorm / RMSNorm / GELU node keeps its input, a modulate node its input when the scale
// needs a gradient, a gated residual its branch when the gate needs one, a linear node its input when
// the weight needs one (linear_activations for adapters), attention q, k, v, its output and logsumexp.
// Views (select, narrow, chunk, reshape of a contiguous tensor) keep their whole storage.
#include "models/sd3/sd3_memory.h"

#include <algorithm>
#include <map>
#include <memory>

#include "engine/module.h"
#include "runtime/shape.h"

namespace wick::sd3 {
namespace {

struct Sizes {
  int64_t batch, img_rows, ctx_rows, h, m, heads, head_dim, e;
  DType dtype;
  Device device;
  bool qk_norm;
  int64_t all_rows() const { return img_rows + ctx_rows; }
};

using Stream = TokenStream;
using Count = ActivationCount;

// The workspace of a block, in rows of its widest tensor ([R_all, max(m, 3h)]) at the arithmetic's
// element size: the highest point of its backward above what it keeps (the MLP's input gradients;
// with adapters the base and low-rank paths' input gradients and their sum). A joint block's backward
// is a Flux double block's: Flux's measured rows (models/flux/flux_memory.cpp) put the tiny MMDiT's
// estimates of tests/models/memory_estimate_test.cpp within -1.4% .. +1.9% of the measured peaks.
constexpr WorkspaceRows kJointWorkspace{1.25, 1.0};

// What one attention's q, k, v projection keeps: modulate(norm) -> qkv -> (ln_q, ln_k). Returns whether
// its heads need a gradient. `heads_kept`: the normalized q and k go to SDPA themselves (attn2), not
// through a concatenation (the joint attention copies them).
struct Projection {
  bool heads_grad = false;
};
Projection count_projection(const Sizes& z, Count& c, const LayerTrainingOf& of, const std::string& attn, int64_t rows,
                            bool input_grad, bool with_q, bool heads_kept) {
  const int64_t h = z.h, e = z.e;
  LinearActivations qkv = linear_activations(of(attn + ".qkv"), rows, h, 3 * h, z.dtype, z.device, input_grad);
  c.keep(qkv.keeps_input, rows * h * e);  // the modulated stream
  c.linear(qkv);
  Projection p;
  const bool norm_trains = z.qk_norm && of(attn + ".ln_q").trainable;
  p.heads_grad = qkv.output_requires_grad || norm_trains;
  const int64_t n_norms = with_q ? 2 : 1;
  if (z.qk_norm) {
    // The RMSNorm nodes keep the fused qkv through their views, and their rstd.
    c.keep(p.heads_grad, rows * 3 * h * e + n_norms * 4 * rows * z.heads);
    if (!p.heads_grad) c.hold(rows * 3 * h * e);
    if (heads_kept)
      c.keep(p.heads_grad, n_norms * rows * h * e);  // the normalized q, k, kept by attention
    else
      c.hold(n_norms * rows * h * e);  // held by the block until it returns
  } else if (heads_kept) {
    c.keep(p.heads_grad, rows * 3 * h * e);  // q, k, v views of the fused qkv, kept by attention
    if (!p.heads_grad) c.hold(rows * 3 * h * e);
  } else {
    c.hold(rows * 3 * h * e);  // the views are held by the block
  }
  return p;
}

// An attention's output [q_rows, h] and logsumexp, and its head merge (a copy, or a view) read by
// `proj_trains` projections.
void count_attention_output(const Sizes& z, Count& c, int64_t q_rows, int64_t kv_rows, bool grad, bool proj_trains,
                            const ActivationShape& shape) {
  const int64_t h = z.h, e = z.e;
  c.note(attention_transient(q_rows, kv_rows, h, shape.dtype, shape.device) + q_rows * h * e);
  c.keep(grad, q_rows * h * e + 4 * q_rows * z.heads);
  if (attention_merge_copies(z.heads, z.head_dim, shape.dtype, shape.device, false)) {
    if (proj_trains)
      c.keep(true, q_rows * h * e);
    else
      c.hold(q_rows * h * e);
  } else {
    c.keep(proj_trains && !grad, q_rows * h * e);
  }
}

// The MLP half of a stream: norm2 (keeps its input `x_grad`), modulate, fc1, GELU, fc2, gated residual.
bool count_mlp(const Sizes& z, Count& c, const LayerTrainingOf& of, const std::string& q, int64_t rows, bool x_grad,
               bool mod_grad) {
  const int64_t h = z.h, m = z.m, e = z.e;
  c.keep(x_grad, rows * h * e + 2 * 4 * rows);  // the stream after attention, kept by norm2 with its statistics
  c.keep(mod_grad, rows * h * e);               // norm2 output, kept by modulate
  LinearActivations fc1 = linear_activations(of(q + "mlp.fc1"), rows, h, m, z.dtype, z.device, x_grad || mod_grad);
  c.keep(fc1.keeps_input, rows * h * e);
  c.linear(fc1);
  c.keep(fc1.output_requires_grad, rows * m * e);  // kept by GELU
  LinearActivations fc2 =
      linear_activations(of(q + "mlp.fc2"), rows, m, h, z.dtype, z.device, fc1.output_requires_grad);
  c.note(rows * m * e);  // GELU's output
  c.keep(fc2.keeps_input, rows * m * e);
  c.linear(fc2);
  c.keep(mod_grad, rows * h * e);  // the MLP output, kept by the gated residual
  return x_grad || fc2.output_requires_grad;
}

// One joint block: the context stream (pre-only in the last block) and the x stream (with attn2 in
// dual-attention blocks), in the order JointBlock::run computes them.
Count joint_block(const Sizes& z, Stream& ctx, Stream& img, bool vec_grad, const LayerTrainingOf& of,
                  const std::string& p, bool pre_only, bool dual, const ActivationShape& shape) {
  const int64_t h = z.h, e = z.e;
  Count c;
  const std::string cq = p + "context_block.", xq = p + "x_block.";
  // Modulations.
  LinearActivations ctx_mod = linear_activations(of(cq + "adaLN_modulation.1"), z.batch, h, (pre_only ? 2 : 6) * h,
                                                 z.dtype, z.device, vec_grad);
  c.linear(ctx_mod);
  LinearActivations x_mod =
      linear_activations(of(xq + "adaLN_modulation.1"), z.batch, h, (dual ? 9 : 6) * h, z.dtype, z.device, vec_grad);
  c.linear(x_mod);
  const bool ctx_mod_grad = ctx_mod.output_requires_grad, x_mod_grad = x_mod.output_requires_grad;
  // Context: norm1 (keeps the stream and its statistics), modulate (keeps the LayerNorm output), qkv.
  if (ctx.requires_grad) c.input += ctx.rows * h * e;
  c.keep(ctx.requires_grad, 2 * 4 * ctx.rows);
  c.keep(ctx_mod_grad, ctx.rows * h * e);
  const Projection ctx_heads = count_projection(z, c, of, cq + "attn", ctx.rows, ctx.requires_grad || ctx_mod_grad,
                                                /*with_q=*/!pre_only, /*heads_kept=*/false);
  // x: norm1 (its output feeds attn and attn2), modulate, qkv.
  if (img.requires_grad) c.input += img.rows * h * e;
  c.keep(img.requires_grad, 2 * 4 * img.rows);
  c.keep(x_mod_grad, img.rows * h * e);
  if (!x_mod_grad) c.hold(img.rows * h * e);
  const Projection x_heads = count_projection(z, c, of, xq + "attn", img.rows, img.requires_grad || x_mod_grad,
                                              /*with_q=*/true, /*heads_kept=*/false);
  // The joint attention: q over [context; x] (x alone when pre-only), k and v over both, each a copy.
  const bool attention_grad = ctx_heads.heads_grad || x_heads.heads_grad;
  const int64_t q_rows = pre_only ? img.rows : z.all_rows(), kv_rows = z.all_rows();
  c.keep(attention_grad, (q_rows + 2 * kv_rows) * h * e);
  if (!attention_grad) c.hold(2 * kv_rows * h * e);
  const bool proj_trains = of(xq + "attn.proj").trains() || (!pre_only && of(cq + "attn.proj").trains());
  count_attention_output(z, c, q_rows, kv_rows, attention_grad, proj_trains, shape);
  // x: proj, gated residual (keeps the branch when the gate trains), attn2, the MLP.
  LinearActivations x_proj =
      linear_activations(of(xq + "attn.proj"), img.rows, h, h, z.dtype, z.device, attention_grad);
  c.linear(x_proj);
  c.keep(x_mod_grad, img.rows * h * e);
  bool x_grad = img.requires_grad || x_mod_grad || x_proj.output_requires_grad;
  if (dual) {
    c.note(img.rows * h * e);  // the stream after the first residual, until attn2's residual replaces it
    const Projection heads2 = count_projection(z, c, of, xq + "attn2", img.rows, img.requires_grad || x_mod_grad,
                                               /*with_q=*/true, /*heads_kept=*/true);
    count_attention_output(z, c, img.rows, img.rows, heads2.heads_grad, of(xq + "attn2.proj").trains(), shape);
    LinearActivations proj2 =
        linear_activations(of(xq + "attn2.proj"), img.rows, h, h, z.dtype, z.device, heads2.heads_grad);
    c.linear(proj2);
    c.keep(x_mod_grad, img.rows * h * e);
    x_grad = x_grad || proj2.output_requires_grad;
  }
  img.requires_grad = count_mlp(z, c, of, xq, img.rows, x_grad, x_mod_grad);
  c.keep(img.requires_grad || x_mod_grad || x_heads.heads_grad, z.batch * (dual ? 9 : 6) * h * e);  // modulation
  // Context: proj, gated residual and MLP, unless pre-only (its output is discarded).
  if (pre_only) {
    c.keep(ctx.requires_grad || ctx_mod_grad || ctx_heads.heads_grad, z.batch * 2 * h * e);
    ctx.requires_grad = false;
    return c;
  }
  LinearActivations ctx_proj =
      linear_activations(of(cq + "attn.proj"), ctx.rows, h, h, z.dtype, z.device, attention_grad);
  c.linear(ctx_proj);
  c.keep(ctx_mod_grad, ctx.rows * h * e);
  const bool ctx_grad = ctx.requires_grad || ctx_mod_grad || ctx_proj.output_requires_grad;
  ctx.requires_grad = count_mlp(z, c, of, cq, ctx.rows, ctx_grad, ctx_mod_grad);
  c.keep(ctx.requires_grad || ctx_mod_grad || ctx_heads.heads_grad, z.batch * 6 * h * e);
  return c;
}

// An embedder MLP (mlp.0 -> SiLU -> mlp.2) on [B, in]; returns whether its output requires a gradient.
bool embedder(const Sizes& z, int64_t in, const LayerTrainingOf& of, const std::string& p, Count& c) {
  return count_embedder_mlp(c, of(p + ".mlp.0"), of(p + ".mlp.2"), z.batch, in, z.h, z.dtype, z.device);
}

bool any_modulation_keeps_input(const Sd3Config& config, const LayerTrainingOf& of) {
  bool keeps = of("final_layer.adaLN_modulation.1").trains();
  for (int64_t i = 0; i < config.depth; ++i)
    for (const char* stream : {".x_block.adaLN_modulation.1", ".context_block.adaLN_modulation.1"})
      keeps = keeps || of("joint_blocks." + std::to_string(i) + stream).trains();
  return keeps;
}

}  // namespace

ActivationProfile sd3_activation_profile(const Sd3Config& config, const ActivationShape& shape, bool checkpointing,
                                         const LayerTrainingOf& of) {
  const int64_t p = config.patch_size;
  const int64_t grid = (shape.latent_height / p) * (shape.latent_width / p);
  const Sizes z{.batch = shape.batch,
                .img_rows = shape.batch * grid,
                .ctx_rows = shape.batch * shape.text_length,
                .h = config.hidden_size,
                .m = config.mlp_hidden(),
                .heads = config.num_heads,
                .head_dim = config.head_dim(),
                .e = dtype_size(shape.dtype),
                .dtype = shape.dtype,
                .device = shape.device,
                .qk_norm = config.qk_norm};
  const int64_t e = z.e, h = z.h, math = math_bytes(shape.dtype, shape.device);
  ActivationProfile profile;
  profile.checkpointing = checkpointing;

  // Embedders: x_embedder on the patchified latents plus the cropped position table (a copy, for a
  // moment), the timestep and pooled MLPs into c, SiLU(c) (kept by every modulation Linear that trains,
  // and by every checkpoint), context_embedder on the text cast to the compute dtype (the batch's own
  // f32 tensor when the compute dtype is f32).
  Count embed;
  const int64_t patch_features = config.in_channels * p * p;
  LinearActivations patch_in =
      linear_activations(of("x_embedder.proj"), z.img_rows, patch_features, h, z.dtype, z.device, false);
  embed.keep(patch_in.keeps_input, z.img_rows * patch_features * e);
  embed.linear(patch_in);
  embed.note(z.img_rows * h * e + grid * h * e);
  bool vec_grad = embedder(z, 256, of, "t_embedder", embed);
  vec_grad = embedder(z, config.pooled_dim, of, "y_embedder", embed) || vec_grad;
  embed.keep(vec_grad, z.batch * h * e);  // c, kept by SiLU
  embed.keep(vec_grad || checkpointing || any_modulation_keeps_input(config, of), z.batch * h * e);
  LinearActivations ctx_in =
      linear_activations(of("context_embedder"), z.ctx_rows, config.context_dim, h, z.dtype, z.device, false);
  embed.keep(ctx_in.keeps_input && e != 4, z.ctx_rows * config.context_dim * e);
  embed.linear(ctx_in);
  profile.segments.push_back(
      {.name = "embedders",
       .parameter_prefixes = {"x_embedder.", "pos_embed", "t_embedder.", "y_embedder.", "context_embedder."},
       .kept = embed.internal,
       .workspace = embed.forward_excess()});

  // A block: without checkpointing it keeps its inputs (when its norms keep them) and its internals;
  // with checkpointing the checkpoint node keeps only its inputs, and the recomputation in backward
  // keeps the internals and makes the outputs again, while the outputs' gradients wait.
  Stream ctx{z.ctx_rows, ctx_in.output_requires_grad}, img{z.img_rows, patch_in.output_requires_grad};
  for (int64_t i = 0; i < config.depth; ++i) {
    const std::string name = "joint_blocks." + std::to_string(i);
    const bool pre_only = i == config.depth - 1;
    Count c = joint_block(z, ctx, img, vec_grad, of, name + ".", pre_only, config.dual_attention(i), shape);
    ActivationSegment s{.name = name, .parameter_prefixes = {name + "."}};
    const int64_t widest = z.all_rows() * std::max(z.m, 3 * h) * math;
    const double rows = c.adapted ? kJointWorkspace.adapted : kJointWorkspace.plain;
    s.workspace = std::max(static_cast<int64_t>(rows * static_cast<double>(widest)), c.forward_excess());
    const int64_t input_bytes = z.all_rows() * h * e;
    const int64_t output_bytes = (pre_only ? z.img_rows : z.all_rows()) * h * e;
    if (checkpointing) {
      s.kept = input_bytes;
      s.recomputed = c.internal + 2 * output_bytes;
    } else {
      s.kept = c.input + c.internal;
    }
    profile.segments.push_back(s);
  }

  // The final layer on the image rows: its LayerNorm keeps the stream and its statistics; then the
  // prediction is unpatchified (a copy) and the loss keeps pred - target in f32 (mse_loss). For a
  // moment: the patches, the prediction, its f32 copy and the squared error.
  Count final_layer;
  LinearActivations ada =
      linear_activations(of("final_layer.adaLN_modulation.1"), z.batch, h, 2 * h, z.dtype, z.device, vec_grad);
  final_layer.linear(ada);
  final_layer.keep(img.requires_grad, z.img_rows * h * e + 2 * 4 * z.img_rows);
  final_layer.keep(img.requires_grad || ada.output_requires_grad, z.batch * 2 * h * e);
  final_layer.keep(ada.output_requires_grad, z.img_rows * h * e);  // LayerNorm output, kept by modulate
  LinearActivations linear = linear_activations(of("final_layer.linear"), z.img_rows, h, config.out_features(), z.dtype,
                                                z.device, img.requires_grad || ada.output_requires_grad);
  final_layer.keep(linear.keeps_input, z.img_rows * h * e);
  final_layer.linear(linear);
  const int64_t prediction = z.img_rows * config.out_features();  // elements of [B, C, H, W]
  final_layer.internal += 4 * prediction;                         // pred - target
  const int64_t moment = prediction * (2 * e + (e != 4 ? 4 : 0) + 4) + 2 * z.img_rows * h * e;
  profile.segments.push_back({.name = "final_layer",
                              .parameter_prefixes = {"final_layer."},
                              .kept = final_layer.internal,
                              .workspace = std::max(moment, final_layer.forward_excess())});
  return profile;
}

MemoryEstimate estimate_sd3_memory(const Sd3Config& config, const TrainingPlan& plan, const MemoryInputs& in) {
  return estimate_planned_memory(
      {.shapes = parameter_shapes(config), .dtype = config.dtype, .block_paths = block_paths(config)}, plan,
      [&](const ActivationShape& shape, bool checkpointing, const LayerTrainingOf& training) {
        return sd3_activation_profile(config, shape, checkpointing, training);
      },
      in);
}

}  // namespace wick::sd3
