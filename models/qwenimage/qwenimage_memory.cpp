// What a Qwen-Image training step keeps for backward, derived from models/qwenimage/qwenimage.cpp and
// qwenimage_blocks.cpp and the ops' saved tensors (engine/autograd/ops_*.cpp), in the notation of
// models/flux/flux_memory.cpp (whose double block this one follows: the same two streams, joint attention over
// [text; image], modulate and gated residuals): per block R rows (batch x tokens) of width h (dim), m (MLP), H heads;
// e bytes per element of the compute dtype; statistics and logsumexp are f32. Qwen-Image's differences: q, k and v
// are three Linears per stream, each stream's QK norms keep their own projections, every modulation Sequential
// applies its own SiLU to temb, the text is RMS-normed before txt_in, and the output layer reads the image stream
// alone.
#include "models/qwenimage/qwenimage_memory.h"

#include <algorithm>
#include <string>

namespace wick::qwenimage {
namespace {

using Count = ActivationCount;
using Stream = TokenStream;

struct Sizes {
  int64_t batch, img_rows, txt_rows, h, m, heads, head_dim, e;
  DType dtype;
  Device device;
  int64_t all_rows() const { return img_rows + txt_rows; }
};

// The block's workspace (WorkspaceRows): Flux's double block's, whose backward has the same widest moment (the MLP's
// input gradients, rows of the wider of m and 3h).
constexpr WorkspaceRows kBlockWorkspace{1.25, 1.0};

// One QwenImageBlock: both streams in, both out. temb_grad: the timestep embedding requires a gradient. last: the
// last block, whose text output nothing reads, so that what its text stream computes after the attention is freed
// when the forward returns (only the image stream reaches the loss).
Count block(const Sizes& z, Stream& img, Stream& txt, bool temb_grad, bool last, const LayerTrainingOf& of,
            const std::string& p, const ActivationShape& shape) {
  const int64_t h = z.h, m = z.m, e = z.e;
  Count c;
  struct PerStream {
    Stream* s;
    std::string name;      // "txt_" / "img_"
    const char* attn[4];   // q, k, v and output Linears
    const char* norms[2];  // q and k norms
    bool mod_grad = false;
  };
  PerStream streams[2] = {
      {&txt, "txt_", {"add_q_proj", "add_k_proj", "add_v_proj", "to_add_out"}, {"norm_added_q", "norm_added_k"}},
      {&img, "img_", {"to_q", "to_k", "to_v", "to_out.0"}, {"norm_q", "norm_k"}}};
  bool attention_grad = false;
  for (PerStream& ps : streams) {
    const Stream& s = *ps.s;
    LinearActivations mod =
        linear_activations(of(p + ps.name + "mod.1"), z.batch, h, 6 * h, z.dtype, z.device, temb_grad);
    c.keep(mod.keeps_input, z.batch * h * e);  // SiLU(temb), kept by a modulation Linear that trains
    c.linear(mod);
    ps.mod_grad = mod.output_requires_grad;
    // norm1 keeps the stream and its mean, rstd iff the stream requires a gradient.
    if (s.requires_grad) c.input += s.rows * h * e;
    c.keep(s.requires_grad, 2 * 4 * s.rows);
    c.keep(ps.mod_grad, s.rows * h * e);  // LayerNorm output, kept by modulate (scale trains)
    const bool in_grad = s.requires_grad || ps.mod_grad;
    bool keeps_input = false, heads_grad = false;
    bool out_grad[3] = {false, false, false};
    for (int i = 0; i < 3; ++i) {
      LinearActivations a = linear_activations(of(p + "attn." + ps.attn[i]), s.rows, h, h, z.dtype, z.device, in_grad);
      keeps_input = keeps_input || a.keeps_input;
      c.linear(a);
      out_grad[i] = a.output_requires_grad;
    }
    c.keep(keeps_input, s.rows * h * e);  // the modulated input, kept once by the projections that train
    // The QK norms keep the q and k projections and their per-head rstd; v is copied into the joint v.
    for (int i = 0; i < 2; ++i) {
      const bool norm = out_grad[i] || of(p + "attn." + ps.norms[i]).trainable;
      c.keep(norm, s.rows * h * e + 4 * s.rows * z.heads);
      heads_grad = heads_grad || norm;
    }
    heads_grad = heads_grad || out_grad[2];
    attention_grad = attention_grad || heads_grad;
    c.keep(in_grad || heads_grad, z.batch * 6 * h * e);  // the modulation, kept by its chunks' users
  }
  // Joint attention over [txt; img]: q, k (after RoPE) and v joined (copies), the output and logsumexp; the
  // normalized heads and the joined q and k before RoPE live for a moment.
  const int64_t rows = z.all_rows();
  c.flops += 4 * rows * (rows / z.batch) * h;
  c.note(4 * rows * h * e);
  c.keep(attention_grad, 3 * rows * h * e);
  c.note(attention_transient(rows, rows, h, shape.dtype, shape.device) + rows * h * e);
  c.keep(attention_grad, rows * h * e + 4 * rows * z.heads);
  // Training data pads the text, so the attention is masked (cuDNN's fused path takes no mask).
  const bool merge_copies = attention_merge_copies(z.heads, z.head_dim, shape.dtype, shape.device, true);
  bool out_keeps_input = false;
  for (PerStream& ps : streams)
    out_keeps_input = out_keeps_input || ((!last || ps.s == &img) && of(p + "attn." + ps.attn[3]).trains());
  if (merge_copies) {
    if (out_keeps_input) c.keep(true, rows * h * e);
    else c.hold(rows * h * e);
  } else {
    c.keep(out_keeps_input && !attention_grad, rows * h * e);
  }
  for (PerStream& ps : streams) {
    Stream& s = *ps.s;
    if (last && ps.s == &txt) continue;
    LinearActivations out =
        linear_activations(of(p + "attn." + ps.attn[3]), s.rows, h, h, z.dtype, z.device, attention_grad);
    c.linear(out);
    c.keep(ps.mod_grad, s.rows * h * e);  // the output projection, kept by the gated residual (gate trains)
    const bool x1_grad = s.requires_grad || ps.mod_grad || out.output_requires_grad;
    c.keep(x1_grad, s.rows * h * e + 2 * 4 * s.rows);  // after attention, kept by norm2 with its statistics
    c.keep(ps.mod_grad, s.rows * h * e);               // norm2 output, kept by modulate
    const std::string mlp = p + ps.name + "mlp.net.";
    LinearActivations fc1 = linear_activations(of(mlp + "0.proj"), s.rows, h, m, z.dtype, z.device, x1_grad);
    c.keep(fc1.keeps_input, s.rows * h * e);
    c.linear(fc1);
    c.keep(fc1.output_requires_grad, s.rows * m * e);  // kept by GELU
    LinearActivations fc2 =
        linear_activations(of(mlp + "2"), s.rows, m, h, z.dtype, z.device, fc1.output_requires_grad);
    c.note(s.rows * m * e);  // GELU's output
    c.keep(fc2.keeps_input, s.rows * m * e);
    c.linear(fc2);
    c.keep(ps.mod_grad, s.rows * h * e);  // MLP output, kept by the gated residual
    s.requires_grad = x1_grad || fc2.output_requires_grad;
  }
  return c;
}

}  // namespace

ActivationProfile qwenimage_activation_profile(const QwenImageConfig& config, const ActivationShape& shape,
                                               bool checkpointing, const LayerTrainingOf& of) {
  const int64_t p = config.patch_size;
  const int64_t grid = (shape.latent_height / p) * (shape.latent_width / p);
  const Sizes z{.batch = shape.batch,
                .img_rows = shape.batch * grid,
                .txt_rows = shape.batch * shape.text_length,
                .h = config.dim,
                .m = config.mlp_hidden,
                .heads = config.n_heads,
                .head_dim = config.head_dim(),
                .e = dtype_size(shape.dtype),
                .dtype = shape.dtype,
                .device = shape.device};
  const int64_t e = z.e, h = z.h, math = math_bytes(shape.dtype, shape.device);
  ActivationProfile profile;
  profile.checkpointing = checkpointing;

  // Embedders: img_in on the packed latents (a copy), the timestep MLP into temb (kept by the SiLUs of the modulations
  // when it requires a gradient, and by every checkpoint), txt_norm on the text cast to the compute dtype (the
  // batch's own tensor in f32) and txt_in.
  Count embed;
  LinearActivations img_in =
      linear_activations(of("img_in"), z.img_rows, config.in_channels, h, z.dtype, z.device, false);
  embed.keep(img_in.keeps_input, z.img_rows * config.in_channels * e);
  embed.linear(img_in);
  const bool temb_grad =
      count_embedder_mlp(embed, of("time_text_embed.timestep_embedder.linear_1"),
                         of("time_text_embed.timestep_embedder.linear_2"), z.batch, 256, h, z.dtype, z.device);
  embed.keep(temb_grad || checkpointing, z.batch * h * e);
  const bool text_norm = of("txt_norm").trainable;
  embed.keep(text_norm, (e != 4 ? z.txt_rows * config.text_dim * e : 0) + 4 * z.txt_rows);
  LinearActivations txt_in =
      linear_activations(of("txt_in"), z.txt_rows, config.text_dim, h, z.dtype, z.device, text_norm);
  embed.keep(txt_in.keeps_input, z.txt_rows * config.text_dim * e);
  embed.linear(txt_in);
  profile.segments.push_back({.name = "embedders",
                              .parameter_prefixes = {"img_in.", "time_text_embed.", "txt_norm.", "txt_in."},
                              .kept = embed.internal,
                              .workspace = embed.forward_excess(),
                              .forward_flops = embed.flops});

  // A block: without checkpointing it keeps its inputs (when its norms keep them) and its internals; with
  // checkpointing the checkpoint keeps its inputs and the recomputation keeps the internals during its own backward.
  Stream img{z.img_rows, img_in.output_requires_grad}, txt{z.txt_rows, txt_in.output_requires_grad};
  const int64_t stream_bytes = z.all_rows() * h * e;
  for (int64_t i = 0; i < config.n_layers; ++i) {
    const std::string name = "transformer_blocks." + std::to_string(i);
    Count c = block(z, img, txt, temb_grad, i == config.n_layers - 1, of, name + ".", shape);
    ActivationSegment s{.name = name, .parameter_prefixes = {name + "."}, .forward_flops = c.flops};
    const double rows = c.adapted ? kBlockWorkspace.adapted : kBlockWorkspace.plain;
    const int64_t widest = z.all_rows() * std::max(z.m, 3 * h) * math;
    s.workspace = std::max(static_cast<int64_t>(rows * static_cast<double>(widest)), c.forward_excess());
    if (checkpointing) {
      s.kept = stream_bytes;
      s.recomputed = c.internal + 2 * stream_bytes;
    } else {
      s.kept = c.input + c.internal;
    }
    profile.segments.push_back(s);
  }
  // The RoPE tables (cos and sin of the joint sequence, f32, one for the batch), kept by the RoPE nodes.
  if (img.requires_grad || txt.requires_grad)
    profile.segments.front().kept += 2 * (grid + shape.text_length) * (z.head_dim / 2) * 4;

  // norm_out on the image stream: SiLU(temb) and its Linear, the LayerNorm (input and statistics), the modulation
  // ([B, 2h], scale then shift), proj_out; then the loss keeps pred - target in f32. For a moment: the unpacked
  // prediction, its f32 copy and the squared error.
  Count final_layer;
  LinearActivations ada = linear_activations(of("norm_out.linear"), z.batch, h, 2 * h, z.dtype, z.device, temb_grad);
  final_layer.keep(ada.keeps_input, z.batch * h * e);
  final_layer.linear(ada);
  final_layer.keep(img.requires_grad, z.img_rows * h * e + 2 * 4 * z.img_rows);
  final_layer.keep(img.requires_grad || ada.output_requires_grad, z.batch * 2 * h * e);
  final_layer.keep(ada.output_requires_grad, z.img_rows * h * e);  // LayerNorm output, kept by modulate
  LinearActivations proj = linear_activations(of("proj_out"), z.img_rows, h, config.patch_features(), z.dtype, z.device,
                                              img.requires_grad || ada.output_requires_grad);
  final_layer.keep(proj.keeps_input, z.img_rows * h * e);
  final_layer.linear(proj);
  const int64_t prediction = z.img_rows * config.patch_features();
  final_layer.internal += 4 * prediction;  // pred - target
  const int64_t moment = prediction * (2 * e + (e != 4 ? 4 : 0) + 4) + 2 * z.img_rows * h * e;
  profile.segments.push_back({.name = "norm_out",
                              .parameter_prefixes = {"norm_out.", "proj_out."},
                              .kept = final_layer.internal,
                              .workspace = std::max(moment, final_layer.forward_excess()),
                              .forward_flops = final_layer.flops});
  return profile;
}

MemoryEstimate estimate_qwenimage_memory(const QwenImageConfig& config, const TrainingPlan& plan,
                                         const MemoryInputs& in) {
  return estimate_planned_memory(
      {.shapes = parameter_shapes(config), .dtype = config.dtype, .block_paths = block_paths(config)}, plan,
      [&](const ActivationShape& shape, bool checkpointing, const LayerTrainingOf& training) {
        return qwenimage_activation_profile(config, shape, checkpointing, training);
      },
      in);
}

}  // namespace wick::qwenimage
