// What a FLUX.2 training step keeps for backward, derived from models/flux2/flux2.cpp and flux2_blocks.cpp
// and the ops' saved tensors (engine/autograd/ops_*.cpp), as models/flux/flux_memory.cpp counts Flux.1's
// (same notation: R rows of width h, m the SwiGLU width, H heads, e bytes per element). What differs:
// the modulations are three Linears shared by every block (counted once, in the embedders), the MLPs are
// SwiGLU (the first Linear's 2m-wide output kept through its halves by silu and the product, silu's output
// kept by the product), and nothing has a bias.
#include "models/flux2/flux2_memory.h"

#include <algorithm>

#include "engine/module.h"
#include "runtime/shape.h"

namespace wick::flux2 {
namespace {

struct Sizes {
  int64_t batch, img_rows, txt_rows, h, m, heads, head_dim, e;
  DType dtype;
  Device device;
  int64_t all_rows() const { return img_rows + txt_rows; }
};

using Stream = TokenStream;
using Count = ActivationCount;

// The workspace of a block (WorkspaceRows) in rows of its widest tensor, measured on the tiny models of
// tests/models/memory_estimate_test.cpp: a single block peaks in the backward of linear1's output views
// (full-width gradients in the compute dtype, summed into the fused one; counted at the element size, which
// the bf16 cases measure: at the arithmetic's f32 size they came out 11% high), a double block in its MLP's
// input gradients (the widest of the SwiGLU's 2m and the fused qkv's 3h, at the arithmetic's size).
constexpr WorkspaceRows kDoubleWorkspace{1.25, 1.0}, kSingleWorkspace{1.5, 1.5};

// The three shared modulations: which of them hands its chunks a gradient.
struct SharedModulation {
  bool img = false, txt = false, single = false;
};

// SwiGLU MLP of one stream on `rows` rows: fc1 (h -> 2m), silu(first half) · second half, fc2 (m -> h).
// Returns whether its output requires a gradient.
bool swiglu_mlp(const Sizes& z, int64_t rows, const LayerTraining& fc1_training, const LayerTraining& fc2_training,
                bool input_grad, Count& c) {
  const int64_t h = z.h, m = z.m, e = z.e;
  LinearActivations fc1 = linear_activations(fc1_training, rows, h, 2 * m, z.dtype, z.device, input_grad);
  c.keep(fc1.keeps_input, rows * h * e);
  c.linear(fc1);
  c.keep(fc1.output_requires_grad, rows * 2 * m * e);  // fc1's output, through its halves (silu, the product)
  c.keep(fc1.output_requires_grad, rows * m * e);      // silu's output, kept by the product
  LinearActivations fc2 = linear_activations(fc2_training, rows, m, h, z.dtype, z.device, fc1.output_requires_grad);
  c.note(rows * m * e);  // the product
  c.keep(fc2.keeps_input, rows * m * e);
  c.linear(fc2);
  return fc2.output_requires_grad;
}

// One double block (img_attn/txt_attn, img_mlp/txt_mlp): both streams in, both out.
Count double_block(const Sizes& z, Stream& img, Stream& txt, const SharedModulation& shared, const LayerTrainingOf& of,
                   const std::string& p, const ActivationShape& shape) {
  const int64_t h = z.h, e = z.e;
  Count c;
  struct PerStream {
    Stream* s;
    std::string name;
    bool mod_grad;
  };
  PerStream streams[2] = {{&txt, "txt_", shared.txt}, {&img, "img_", shared.img}};
  bool attention_grad = false;
  for (PerStream& ps : streams) {
    const Stream& s = *ps.s;
    const std::string q = p + ps.name;
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
  }
  // Joint attention over [txt; img]: q and k after RoPE and v joined (copies), the output, the
  // logsumexp; q and k joined before RoPE live for a moment.
  const int64_t rows = z.all_rows();
  c.flops += 4 * rows * (rows / z.batch) * h;
  c.note(2 * rows * h * e);
  c.keep(attention_grad, 3 * rows * h * e);
  c.note(attention_transient(rows, rows, h, shape.dtype, shape.device) + rows * h * e);
  c.keep(attention_grad, rows * h * e + 4 * rows * z.heads);
  const bool merge_copies = attention_merge_copies(z.heads, z.head_dim, shape.dtype, shape.device, false);
  bool proj_keeps_input = false;
  for (PerStream& ps : streams) proj_keeps_input = proj_keeps_input || of(p + ps.name + "attn.proj").trains();
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
    const bool mlp_grad = swiglu_mlp(z, s.rows, of(q + "mlp.0"), of(q + "mlp.2"), x1_grad || ps.mod_grad, c);
    c.keep(ps.mod_grad, s.rows * h * e);  // MLP output, kept by the gated residual
    s.requires_grad = x1_grad || mlp_grad;
  }
  return c;
}

// One single block (linear1 = [qkv | SwiGLU in], linear2 = [attention | SwiGLU out] -> hidden).
Count single_block(const Sizes& z, Stream& x, bool mod_grad, const LayerTrainingOf& of, const std::string& p,
                   const ActivationShape& shape) {
  const int64_t h = z.h, m = z.m, e = z.e, rows = x.rows;
  Count c;
  if (x.requires_grad) c.input += rows * h * e;  // kept by the LayerNorm
  c.keep(x.requires_grad, 2 * 4 * rows);
  c.keep(mod_grad, rows * h * e);  // LayerNorm output, kept by modulate
  LinearActivations linear1 =
      linear_activations(of(p + "linear1"), rows, h, 3 * h + 2 * m, z.dtype, z.device, x.requires_grad || mod_grad);
  c.keep(linear1.keeps_input, rows * h * e);
  c.linear(linear1);
  // linear1's output, kept through views by the RMSNorm nodes (q, k), attention (v), silu and the product;
  // the RMSNorms' rstd; silu's output, kept by the product.
  const bool norm_trains = of(p + "norm.query_norm").trainable;
  const bool fused_grad = linear1.output_requires_grad || norm_trains;
  c.keep(fused_grad, rows * (3 * h + 2 * m) * e + 2 * 4 * rows * z.heads);
  c.keep(linear1.output_requires_grad, rows * m * e);
  c.hold(2 * rows * h * e);  // the normalized q and k
  c.hold(rows * m * e);      // the SwiGLU output, held until the block returns
  // q and k after RoPE, the attention output and logsumexp.
  c.flops += 4 * rows * (rows / z.batch) * h;
  c.keep(fused_grad, 2 * rows * h * e);
  c.note(attention_transient(rows, rows, h, shape.dtype, shape.device) + rows * h * e);
  c.keep(fused_grad, rows * h * e + 4 * rows * z.heads);
  if (attention_merge_copies(z.heads, z.head_dim, shape.dtype, shape.device, false)) c.hold(rows * h * e);
  LinearActivations linear2 = linear_activations(of(p + "linear2"), rows, h + m, h, z.dtype, z.device, fused_grad);
  // The concat [attention | SwiGLU] that linear2 reads.
  if (linear2.keeps_input)
    c.keep(true, rows * (h + m) * e);
  else
    c.hold(rows * (h + m) * e);
  c.linear(linear2);
  c.keep(mod_grad, rows * h * e);  // linear2's output, kept by the gated residual
  x.requires_grad = x.requires_grad || mod_grad || linear2.output_requires_grad;
  return c;
}

// An MLPEmbedder (in_layer -> SiLU -> out_layer) on [B, in]; returns whether its output requires a gradient.
bool embedder(const Sizes& z, int64_t in, const LayerTrainingOf& of, const std::string& p, Count& c) {
  return count_embedder_mlp(c, of(p + ".in_layer"), of(p + ".out_layer"), z.batch, in, z.h, z.dtype, z.device);
}

}  // namespace

ActivationProfile flux2_activation_profile(const Flux2Config& config, const ActivationShape& shape, bool checkpointing,
                                           const LayerTrainingOf& of) {
  const int64_t grid = shape.latent_height * shape.latent_width;
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

  // Embedders: img_in on the packed latents, the time / guidance MLPs into vec, SiLU(vec) (kept by the
  // modulation Linears that train, and by the final layer's), the three shared modulations on it (their
  // outputs kept by every block's modulate and gated residual), txt_in on the text cast to the compute
  // dtype, and the cached RoPE tables.
  Count embed;
  LinearActivations img_in =
      linear_activations(of("img_in"), z.img_rows, config.in_channels, h, z.dtype, z.device, false);
  embed.keep(img_in.keeps_input, z.img_rows * config.in_channels * e);
  embed.linear(img_in);
  bool vec_grad = embedder(z, 256, of, "time_in", embed);
  if (config.guidance_embed) vec_grad = embedder(z, 256, of, "guidance_in", embed) || vec_grad;
  embed.keep(vec_grad, z.batch * h * e);  // vec, kept by SiLU
  const char* const kModulations[] = {"double_stream_modulation_img.lin", "double_stream_modulation_txt.lin",
                                      "single_stream_modulation.lin"};
  const int64_t kChunks[] = {6, 6, 3};
  bool silu_kept = of("final_layer.adaLN_modulation.1").trains();
  for (const char* name : kModulations) silu_kept = silu_kept || of(name).trains();
  embed.keep(vec_grad || silu_kept, z.batch * h * e);  // SiLU(vec)
  bool mod_grad[3];
  for (int i = 0; i < 3; ++i) {
    LinearActivations mod = linear_activations(of(kModulations[i]), z.batch, h, kChunks[i] * h, z.dtype, z.device,
                                               vec_grad);
    embed.linear(mod);
    mod_grad[i] = mod.output_requires_grad;
    embed.keep(true, z.batch * kChunks[i] * h * e);  // the chunks, kept by the blocks' modulate / gated residual
  }
  LinearActivations txt_in =
      linear_activations(of("txt_in"), z.txt_rows, config.context_dim, h, z.dtype, z.device, false);
  embed.keep(txt_in.keeps_input && e != 4, z.txt_rows * config.context_dim * e);
  embed.linear(txt_in);
  embed.internal += 2 * (grid + shape.text_length) * (z.head_dim / 2) * 4;
  profile.segments.push_back({.name = "embedders",
                              .parameter_prefixes = {"img_in.", "time_in.", "guidance_in.", "txt_in.",
                                                     "double_stream_modulation_", "single_stream_modulation."},
                              .kept = embed.internal,
                              .workspace = embed.forward_excess(),
                              .forward_flops = embed.flops});

  // A block (block_segment): its inputs and internals kept, or with checkpointing its inputs only.
  auto add_block = [&](const std::string& name, const Count& c, int64_t input_bytes, int64_t output_bytes,
                       int64_t widest) {
    const WorkspaceRows& kind = name.rfind("single", 0) == 0 ? kSingleWorkspace : kDoubleWorkspace;
    profile.segments.push_back(block_segment(name, c, checkpointing, input_bytes, output_bytes, widest, kind));
  };
  const SharedModulation shared{.img = mod_grad[0], .txt = mod_grad[1], .single = mod_grad[2]};
  Stream img{z.img_rows, img_in.output_requires_grad}, txt{z.txt_rows, txt_in.output_requires_grad};
  for (int64_t i = 0; i < config.depth; ++i) {
    const std::string name = "double_blocks." + std::to_string(i);
    Count c = double_block(z, img, txt, shared, of, name + ".", shape);
    const int64_t stream_bytes = z.all_rows() * h * e;
    add_block(name, c, stream_bytes, stream_bytes, z.all_rows() * std::max(2 * z.m, 3 * h) * math);
  }
  Stream x{z.all_rows(), img.requires_grad || txt.requires_grad};
  for (int64_t i = 0; i < config.depth_single; ++i) {
    const std::string name = "single_blocks." + std::to_string(i);
    Count c = single_block(z, x, shared.single, of, name + ".", shape);
    add_block(name, c, x.rows * h * e, x.rows * h * e, x.rows * (3 * h + 2 * z.m) * e);
  }

  profile.segments.push_back(adaln_final_layer_segment(of, {.batch = z.batch, .img_rows = z.img_rows, .hidden = h,
                                                          .out_features = config.in_channels, .dtype = z.dtype,
                                                          .device = z.device},
                                                    x, vec_grad));
  return profile;
}

MemoryEstimate estimate_flux2_memory(const Flux2Config& config, const TrainingPlan& plan, const MemoryInputs& in) {
  return estimate_planned_memory(
      {.shapes = parameter_shapes(config), .dtype = config.dtype, .block_paths = block_paths(config)}, plan,
      [&](const ActivationShape& shape, bool checkpointing, const LayerTrainingOf& training) {
        return flux2_activation_profile(config, shape, checkpointing, training);
      },
      in);
}

}  // namespace wick::flux2
