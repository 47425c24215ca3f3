// What a Flux training step keeps for backward, derived from models/flux/flux.cpp and
// flux_blocks.cpp and the ops' saved tensors (engine/autograd/ops_*.cpp). Notation, per block:
// R rows (batch x tokens) of width h (hidden), m (MLP), H heads; e bytes per element of the compute
// dtype; statistics and logsumexp are f32. "kept iff X" names the node that keeps a tensor and when
// it is recorded: a node exists only when one of its inputs requires a gradient, and a LayerNorm,
// RMSNorm or GELU node keeps its input, a modulate node its input when the scale needs a gradient,
// a gated residual its branch when the gate needs one, a linear node its input when the weight
// needs one (linear_activations for adapters), attention q, k, v, its output and logsumexp.
// Views (select, narrow, chunk, reshape of a contiguous tensor) keep their whole storage.
#include "models/flux/flux_memory.h"

#include <algorithm>
#include <map>

#include "engine/module.h"
#include "runtime/shape.h"

namespace wick::flux {
namespace {

struct Sizes {
  int64_t batch, img_rows, txt_rows, h, m, heads, head_dim, e;
  DType dtype;
  Device device;
  int64_t all_rows() const { return img_rows + txt_rows; }
};

using Stream = TokenStream;
using Count = ActivationCount;

// The workspace of a block (WorkspaceRows), found by tracing the allocations of every backward node on the tiny
// models of tests/models/memory_estimate_test.cpp.
// A single block peaks in the backward of linear1's output views: each narrow / select gradient is
// a full-width zero tensor [R, 3h + m], summed into the fused gradient (1.49 rows measured with
// LoRA); a double block in its MLP's input gradients (1.25 rows of the wider of m and 3h with LoRA,
// whose backward holds the base and low-rank paths' input gradients and their sum; 1.0 without).
constexpr WorkspaceRows kDoubleWorkspace{1.25, 1.0}, kSingleWorkspace{1.5, 1.5};

// One double block (img_attn/txt_attn, img_mlp/txt_mlp, img_mod/txt_mod): both streams in, both out.
Count double_block(const Sizes& z, Stream& img, Stream& txt, bool vec_grad, const LayerTrainingOf& of,
                   const std::string& p, const ActivationShape& shape) {
  const int64_t h = z.h, m = z.m, e = z.e;
  Count c;
  struct PerStream {
    Stream* s;
    std::string name;
    bool mod_grad = false;
  };
  PerStream streams[2] = {{&txt, "txt_"}, {&img, "img_"}};
  bool attention_grad = false;
  for (PerStream& ps : streams) {
    const Stream& s = *ps.s;
    const std::string q = p + ps.name;
    LinearActivations mod = linear_activations(of(q + "mod.lin"), z.batch, h, 6 * h, z.dtype, z.device, vec_grad);
    c.linear(mod);
    ps.mod_grad = mod.output_requires_grad;
    // norm1 keeps the stream and its mean, rstd iff the stream requires a gradient.
    if (s.requires_grad) c.input += s.rows * h * e;
    c.keep(s.requires_grad, 2 * 4 * s.rows);
    c.keep(ps.mod_grad, s.rows * h * e);  // LayerNorm output, kept by modulate (scale trains)
    LinearActivations qkv =
        linear_activations(of(q + "attn.qkv"), s.rows, h, 3 * h, z.dtype, z.device, s.requires_grad || ps.mod_grad);
    c.keep(qkv.keeps_input, s.rows * h * e);
    c.linear(qkv);
    // The fused qkv, kept through the q/k select views by the RMSNorm nodes, and their rstd.
    const bool norm_trains = of(q + "attn.norm.query_norm").trainable;
    const bool heads_grad = qkv.output_requires_grad || norm_trains;
    c.keep(heads_grad, s.rows * 3 * h * e + 2 * 4 * s.rows * z.heads);
    c.hold(2 * s.rows * h * e);  // the normalized q and k, held by the block until it returns
    attention_grad = attention_grad || heads_grad;
    c.keep(s.requires_grad || ps.mod_grad || heads_grad, z.batch * 6 * h * e);  // modulation, kept by its chunks' users
  }
  // Joint attention over [txt; img]: q and k after RoPE and v joined (copies), the output, the
  // logsumexp; q and k joined before RoPE live for a moment.
  const int64_t rows = z.all_rows();
  c.flops += 4 * rows * (rows / z.batch) * h;  // q k^T and the weighted sum of v, per batch element
  c.note(2 * rows * h * e);
  c.keep(attention_grad, 3 * rows * h * e);
  c.note(attention_transient(rows, rows, h, shape.dtype, shape.device) + rows * h * e);
  c.keep(attention_grad, rows * h * e + 4 * rows * z.heads);
  const bool merge_copies = attention_merge_copies(z.heads, z.head_dim, shape.dtype, shape.device, false);
  bool proj_keeps_input = false;
  for (PerStream& ps : streams) proj_keeps_input = proj_keeps_input || of(p + ps.name + "attn.proj").trains();
  // The output [B, H, L, D] read as [B, L, H·D]: a copy (held by the block, kept by a proj that
  // trains) or a view of the output (kept already when attention needs gradients).
  if (merge_copies) {
    if (proj_keeps_input)
      c.keep(true, rows * h * e);
    else
      c.hold(rows * h * e);
  } else {
    c.keep(proj_keeps_input && !attention_grad, rows * h * e);
  }
  for (PerStream& ps : streams) {
    Stream& s = *ps.s;
    const std::string q = p + ps.name;
    LinearActivations proj = linear_activations(of(q + "attn.proj"), s.rows, h, h, z.dtype, z.device, attention_grad);
    c.linear(proj);
    c.keep(ps.mod_grad, s.rows * h * e);  // proj output, kept by the gated residual (gate trains)
    const bool x1_grad = s.requires_grad || ps.mod_grad || proj.output_requires_grad;
    c.keep(x1_grad, s.rows * h * e + 2 * 4 * s.rows);  // after attention, kept by norm2 with its statistics
    c.keep(ps.mod_grad, s.rows * h * e);               // norm2 output, kept by modulate
    LinearActivations fc1 =
        linear_activations(of(q + "mlp.0"), s.rows, h, m, z.dtype, z.device, x1_grad || ps.mod_grad);
    c.keep(fc1.keeps_input, s.rows * h * e);
    c.linear(fc1);
    c.keep(fc1.output_requires_grad, s.rows * m * e);  // kept by GELU
    LinearActivations fc2 =
        linear_activations(of(q + "mlp.2"), s.rows, m, h, z.dtype, z.device, fc1.output_requires_grad);
    c.note(s.rows * m * e);  // GELU's output
    c.keep(fc2.keeps_input, s.rows * m * e);
    c.linear(fc2);
    c.keep(ps.mod_grad, s.rows * h * e);  // MLP output, kept by the gated residual
    s.requires_grad = x1_grad || fc2.output_requires_grad;
  }
  return c;
}

// One single block (linear1 = [qkv | MLP in], linear2 = [attention | MLP] -> hidden, modulation).
Count single_block(const Sizes& z, Stream& x, bool vec_grad, const LayerTrainingOf& of, const std::string& p,
                   const ActivationShape& shape) {
  const int64_t h = z.h, m = z.m, e = z.e, rows = x.rows;
  Count c;
  LinearActivations mod = linear_activations(of(p + "modulation.lin"), z.batch, h, 3 * h, z.dtype, z.device, vec_grad);
  c.linear(mod);
  const bool mod_grad = mod.output_requires_grad;
  if (x.requires_grad) c.input += rows * h * e;  // kept by the LayerNorm
  c.keep(x.requires_grad, 2 * 4 * rows);
  c.keep(mod_grad, rows * h * e);  // LayerNorm output, kept by modulate
  LinearActivations linear1 =
      linear_activations(of(p + "linear1"), rows, h, 3 * h + m, z.dtype, z.device, x.requires_grad || mod_grad);
  c.keep(linear1.keeps_input, rows * h * e);
  c.linear(linear1);
  // linear1's output, kept through views by the RMSNorm nodes (q, k), attention (v) and GELU; rstd.
  const bool norm_trains = of(p + "norm.query_norm").trainable;
  const bool fused_grad = linear1.output_requires_grad || norm_trains;
  c.keep(fused_grad, rows * (3 * h + m) * e + 2 * 4 * rows * z.heads);
  c.hold(2 * rows * h * e);  // the normalized q and k
  c.hold(rows * m * e);      // GELU's output, held until the block returns
  // q and k after RoPE, the attention output and logsumexp.
  c.flops += 4 * rows * (rows / z.batch) * h;
  c.keep(fused_grad, 2 * rows * h * e);
  c.note(attention_transient(rows, rows, h, shape.dtype, shape.device) + rows * h * e);
  c.keep(fused_grad, rows * h * e + 4 * rows * z.heads);
  if (attention_merge_copies(z.heads, z.head_dim, shape.dtype, shape.device, false)) c.hold(rows * h * e);
  LinearActivations linear2 = linear_activations(of(p + "linear2"), rows, h + m, h, z.dtype, z.device, fused_grad);
  // The concat [attention | GELU] that linear2 reads.
  if (linear2.keeps_input)
    c.keep(true, rows * (h + m) * e);
  else
    c.hold(rows * (h + m) * e);
  c.linear(linear2);
  c.keep(mod_grad, rows * h * e);  // linear2's output, kept by the gated residual
  c.keep(x.requires_grad || mod_grad || fused_grad, z.batch * 3 * h * e);  // the modulation
  x.requires_grad = x.requires_grad || mod_grad || linear2.output_requires_grad;
  return c;
}

// An MLPEmbedder (in_layer -> SiLU -> out_layer) on [B, in]; returns whether its output requires a gradient.
bool embedder(const Sizes& z, int64_t in, const LayerTrainingOf& of, const std::string& p, Count& c) {
  return count_embedder_mlp(c, of(p + ".in_layer"), of(p + ".out_layer"), z.batch, in, z.h, z.dtype, z.device);
}

bool any_modulation_keeps_input(const FluxConfig& config, const LayerTrainingOf& of) {
  bool keeps = of("final_layer.adaLN_modulation.1").trains();
  for (int64_t i = 0; i < config.depth; ++i)
    for (const char* stream : {"img_mod.lin", "txt_mod.lin"})
      keeps = keeps || of("double_blocks." + std::to_string(i) + "." + stream).trains();
  for (int64_t i = 0; i < config.depth_single; ++i)
    keeps = keeps || of("single_blocks." + std::to_string(i) + ".modulation.lin").trains();
  return keeps;
}

}  // namespace

ActivationProfile flux_activation_profile(const FluxConfig& config, const ActivationShape& shape, bool checkpointing,
                                          const LayerTrainingOf& of) {
  const int64_t grid = (shape.latent_height / 2) * (shape.latent_width / 2);
  const Sizes z{.batch = shape.batch,
                .img_rows = shape.batch * grid,
                .txt_rows = shape.batch * shape.text_length,
                .h = config.hidden_size,
                .m = config.mlp_hidden(),
                .heads = config.num_heads,
                .head_dim = config.head_dim(),
                .e = dtype_size(shape.dtype),
                .dtype = shape.dtype,
                .device = shape.device};
  const int64_t e = z.e, h = z.h, math = math_bytes(shape.dtype, shape.device);
  ActivationProfile profile;
  profile.checkpointing = checkpointing;

  // Embedders: img_in on the packed latents, the time / guidance / pooled MLPs into vec, SiLU(vec)
  // (kept by every modulation Linear that trains, and by every checkpoint), txt_in on the text cast to the compute dtype
  // (the batch's own f32 tensor when the compute dtype is f32), and the cached RoPE tables.
  Count embed;
  LinearActivations img_in =
      linear_activations(of("img_in"), z.img_rows, config.in_channels, h, z.dtype, z.device, false);
  embed.keep(img_in.keeps_input, z.img_rows * config.in_channels * e);
  embed.linear(img_in);
  bool vec_grad = embedder(z, 256, of, "time_in", embed);
  if (config.guidance_embed) vec_grad = embedder(z, 256, of, "guidance_in", embed) || vec_grad;
  vec_grad = embedder(z, config.vec_dim, of, "vector_in", embed) || vec_grad;
  embed.keep(vec_grad, z.batch * h * e);  // vec, kept by SiLU
  embed.keep(vec_grad || checkpointing || any_modulation_keeps_input(config, of), z.batch * h * e);
  LinearActivations txt_in =
      linear_activations(of("txt_in"), z.txt_rows, config.context_dim, h, z.dtype, z.device, false);
  embed.keep(txt_in.keeps_input && e != 4, z.txt_rows * config.context_dim * e);
  embed.linear(txt_in);
  embed.internal += 2 * (grid + shape.text_length) * (z.head_dim / 2) * 4;
  profile.segments.push_back({.name = "embedders",
                              .parameter_prefixes = {"img_in.", "time_in.", "guidance_in.", "vector_in.", "txt_in."},
                              .kept = embed.internal,
                              .workspace = embed.forward_excess(),
                              .forward_flops = embed.flops});

  // A block (block_segment): its inputs and internals kept, or with checkpointing its inputs only.
  auto add_block = [&](const std::string& name, const Count& c, int64_t input_bytes, int64_t output_bytes,
                       int64_t widest) {
    const WorkspaceRows& kind = name.rfind("single", 0) == 0 ? kSingleWorkspace : kDoubleWorkspace;
    profile.segments.push_back(block_segment(name, c, checkpointing, input_bytes, output_bytes, widest, kind));
  };
  Stream img{z.img_rows, img_in.output_requires_grad}, txt{z.txt_rows, txt_in.output_requires_grad};
  for (int64_t i = 0; i < config.depth; ++i) {
    const std::string name = "double_blocks." + std::to_string(i);
    Count c = double_block(z, img, txt, vec_grad, of, name + ".", shape);
    const int64_t stream_bytes = z.all_rows() * h * e;
    add_block(name, c, stream_bytes, stream_bytes, z.all_rows() * std::max(z.m, 3 * h) * math);
  }
  Stream x{z.all_rows(), img.requires_grad || txt.requires_grad};
  for (int64_t i = 0; i < config.depth_single; ++i) {
    const std::string name = "single_blocks." + std::to_string(i);
    Count c = single_block(z, x, vec_grad, of, name + ".", shape);
    add_block(name, c, x.rows * h * e, x.rows * h * e, x.rows * (3 * h + z.m) * math);
  }

  profile.segments.push_back(adaln_final_layer_segment(of, {.batch = z.batch, .img_rows = z.img_rows, .hidden = h,
                                                          .out_features = config.in_channels, .dtype = z.dtype,
                                                          .device = z.device},
                                                    x, vec_grad));
  return profile;
}

MemoryEstimate estimate_flux_memory(const FluxConfig& config, const TrainingPlan& plan, const MemoryInputs& in) {
  return estimate_planned_memory(
      {.shapes = parameter_shapes(config), .dtype = config.dtype, .block_paths = block_paths(config)}, plan,
      [&](const ActivationShape& shape, bool checkpointing, const LayerTrainingOf& training) {
        return flux_activation_profile(config, shape, checkpointing, training);
      },
      in);
}

}  // namespace wick::flux
