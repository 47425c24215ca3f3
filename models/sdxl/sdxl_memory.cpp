// What an SDXL UNet training step keeps for backward, derived from models/sdxl/sdxl_unet.cpp and sdxl_blocks.cpp and
// the ops' saved tensors: a GroupNorm / LayerNorm node keeps its input and f32 statistics, SiLU and GELU their input,
// a product both factors, a convolution node its input (whatever trains: Conv2dNode keeps x), a linear node its
// input when its weight trains (linear_activations for adapters), attention q, k, v, its output and logsumexp; chunk
// views keep their whole storage. Counted per input, middle and output block for the run's adapters; N = the
// block's latent positions, e bytes per element of the compute dtype. This count is coarser than Flux's and SD3's:
// it assumes every block needs input gradients (an adapter or trainable weight before it), and its backward
// workspace is a fixed multiple of the block's widest tensor (tests/models/memory_estimate_test.cpp measures it).
#include "models/sdxl/sdxl_memory.h"

#include <algorithm>
#include <string>

namespace wick::sdxl {
namespace {

using Count = ActivationCount;

struct Sizes {
  int64_t batch, text_length, time_embed_dim, e;
  DType dtype;
  Device device;
};

// A LoCon convolution's extra: down(x) [B, r, N] kept by the up convolution.
int64_t conv_adapter_bytes(const LayerTraining& t, int64_t positions, const Sizes& z) {
  return t.rank > 0 ? z.batch * t.rank * positions * z.e : 0;
}

// A resnet on `positions` latent positions, in -> out channels: GN1 keeps x (the block's input, counted by the
// caller), SiLU its output, conv1 the SiLU output; h (conv1 + emb) kept by GN2, GN2's output by SiLU, SiLU's by
// conv2; the skip convolution keeps x too.
void resnet(const Sizes& z, Count& c, const LayerTrainingOf& of, const std::string& p, int64_t in, int64_t out,
            int64_t positions) {
  const int64_t rows = z.batch * positions, e = z.e, stats = 2 * 4 * z.batch * 32;
  c.keep(true, 2 * rows * in * e + stats);       // GN1 output (kept by SiLU), SiLU output (kept by conv1)
  c.keep(true, 3 * rows * out * e + stats);      // h, GN2 output, SiLU output
  c.keep(true, conv_adapter_bytes(of(p + ".in_layers.2"), positions, z) +
                   conv_adapter_bytes(of(p + ".out_layers.3"), positions, z));
  c.linear(linear_activations(of(p + ".emb_layers.1"), z.batch, z.time_embed_dim, out, z.dtype, z.device, true));
  c.note(2 * rows * out * e);  // conv1's output and the sum with the embedding
}

// A spatial transformer of `depth` blocks on `positions` tokens of width `ch`, heads of `width`.
void transformer(const Sizes& z, Count& c, const LayerTrainingOf& of, const std::string& p, int64_t ch,
                 int64_t context_dim, int64_t depth, int64_t heads, int64_t positions) {
  const int64_t rows = z.batch * positions, ctx_rows = z.batch * z.text_length, e = z.e;
  const int64_t stats = 2 * 4 * rows, lse = 4 * rows * heads;
  auto linear = [&](const std::string& name, int64_t n_rows, int64_t in, int64_t out) {
    LinearActivations a = linear_activations(of(name), n_rows, in, out, z.dtype, z.device, true);
    c.linear(a);
    return a.keeps_input;
  };
  c.keep(true, rows * ch * e + 2 * 4 * z.batch * 32);  // GN output, and its [B, N, C] copy (proj_in's input)
  c.keep(linear(p + ".proj_in", rows, ch, ch), rows * ch * e);
  for (int64_t k = 0; k < depth; ++k) {
    const std::string b = p + ".transformer_blocks." + std::to_string(k);
    // attn1: LN1 keeps the stream; q, k, v (kept by attention) from LN1's output; the output, logsumexp, the merge.
    c.keep(true, rows * ch * e + stats);
    bool ln_kept = linear(b + ".attn1.to_q", rows, ch, ch);
    ln_kept = linear(b + ".attn1.to_k", rows, ch, ch) || ln_kept;
    ln_kept = linear(b + ".attn1.to_v", rows, ch, ch) || ln_kept;
    c.keep(ln_kept, rows * ch * e);
    c.keep(true, 3 * rows * ch * e + rows * ch * e + lse);
    c.note(attention_transient(rows, rows, ch, z.dtype, z.device));
    c.keep(linear(b + ".attn1.to_out.0", rows, ch, ch), rows * ch * e);
    // attn2: LN2 keeps the stream; q from LN2's output, k, v from the context.
    c.keep(true, rows * ch * e + stats);
    c.keep(linear(b + ".attn2.to_q", rows, ch, ch), rows * ch * e);
    linear(b + ".attn2.to_k", ctx_rows, context_dim, ch);
    linear(b + ".attn2.to_v", ctx_rows, context_dim, ch);
    c.keep(true, rows * ch * e + 2 * ctx_rows * ch * e + rows * ch * e + lse);
    c.note(attention_transient(rows, ctx_rows, ch, z.dtype, z.device));
    c.keep(linear(b + ".attn2.to_out.0", rows, ch, ch), rows * ch * e);
    // GEGLU: LN3 keeps the stream; the projection's 8C output (both halves' views), GELU(gate), the product.
    c.keep(true, rows * ch * e + stats);
    c.keep(linear(b + ".ff.net.0.proj", rows, ch, 8 * ch), rows * ch * e);
    c.keep(true, rows * 8 * ch * e + rows * 4 * ch * e);
    c.keep(linear(b + ".ff.net.2", rows, 4 * ch, ch), rows * 4 * ch * e);
  }
  c.keep(linear(p + ".proj_out", rows, ch, ch), rows * ch * e);
  c.note(2 * rows * ch * e);  // proj_out's output and its [B, C, H, W] copy
}

// Backward's workspace above what the segments keep: gradients in flight, measured as multiples of the block's
// widest activation (the GEGLU's 8C rows in a transformer, the concatenated input in an up block's resnet).
constexpr double kWorkspaceWidest = 3.0;

}  // namespace

ActivationProfile sdxl_activation_profile(const UnetConfig& c, const ActivationShape& shape, bool checkpointing,
                                          const LayerTrainingOf& of) {
  const Sizes z{shape.batch, shape.text_length, c.time_embed_dim, dtype_size(shape.dtype), shape.dtype, shape.device};
  ActivationProfile profile;
  profile.checkpointing = checkpointing;
  int64_t height = shape.latent_height, width = shape.latent_width;
  auto add_segment = [&](const std::string& name, std::vector<std::string> prefixes, const Count& count,
                         int64_t input_bytes, int64_t widest_bytes, bool checkpointed) {
    ActivationSegment s{.name = name, .parameter_prefixes = std::move(prefixes)};
    const int64_t internal = count.internal + count.held;
    s.kept = input_bytes + (checkpointed ? 0 : internal);
    s.recomputed = checkpointed ? internal : 0;
    s.workspace = std::max<int64_t>(count.forward_excess(), static_cast<int64_t>(kWorkspaceWidest * widest_bytes));
    profile.segments.push_back(std::move(s));
  };
  // Embedders: the time and size sinusoids through two frozen (or trained) MLPs; SiLU(emb) kept for every resnet.
  {
    Count count;
    count.keep(true, 2 * z.batch * c.time_embed_dim * z.e);
    add_segment("embedders", {"time_embed.", "label_emb."}, count, 0, 0, false);
  }
  const int64_t e = z.e, b = z.batch;
  std::vector<int64_t> skips = {c.model_channels};
  int64_t ch = c.model_channels, block = 1;
  const int64_t latents_bytes = b * c.in_channels * height * width * e;
  {
    Count count;  // conv_in keeps the latents
    add_segment("input_blocks.0", {"input_blocks.0."}, count, latents_bytes, 0, false);
  }
  for (int64_t level = 0; level < c.n_levels(); ++level) {
    const int64_t out = c.level_channels(level), depth = c.transformer_depth[static_cast<size_t>(level)];
    const int64_t positions = height * width;
    for (int64_t j = 0; j < c.num_res_blocks; ++j, ++block) {
      const std::string name = "input_blocks." + std::to_string(block);
      Count count;
      resnet(z, count, of, name + ".0", ch, out, positions);
      if (depth > 0) transformer(z, count, of, name + ".1", out, c.context_dim, depth, c.heads(out), positions);
      add_segment(name, {name + "."}, count, b * ch * positions * e,
                  b * positions * (depth > 0 ? 8 * out : std::max(ch, out)) * e, checkpointing);
      ch = out;
      skips.push_back(ch);
    }
    if (level < c.n_levels() - 1) {
      const std::string name = "input_blocks." + std::to_string(block++);
      Count count;  // the stride-2 convolution keeps its input
      count.keep(true, conv_adapter_bytes(of(name + ".0.op"), positions / 4, z));
      add_segment(name, {name + "."}, count, b * ch * positions * e, b * ch * positions * e, checkpointing);
      height /= 2, width /= 2;
      skips.push_back(ch);
    }
  }
  {
    const int64_t positions = height * width;
    Count count;
    resnet(z, count, of, "middle_block.0", ch, ch, positions);
    transformer(z, count, of, "middle_block.1", ch, c.context_dim, c.transformer_depth_middle, c.heads(ch), positions);
    count.keep(true, b * ch * positions * e);  // the second resnet's input
    resnet(z, count, of, "middle_block.2", ch, ch, positions);
    add_segment("middle_block", {"middle_block."}, count, b * ch * positions * e, b * positions * 8 * ch * e,
                checkpointing);
  }
  block = 0;
  for (int64_t level = c.n_levels() - 1; level >= 0; --level) {
    const int64_t out = c.level_channels(level), depth = c.transformer_depth[static_cast<size_t>(level)];
    for (int64_t j = 0; j <= c.num_res_blocks; ++j, ++block) {
      const std::string name = "output_blocks." + std::to_string(block);
      const int64_t positions = height * width, in = ch + skips.back();
      skips.pop_back();
      Count count;
      // The concatenation [h; skip] is the resnet's input (inside a checkpoint: recomputed).
      count.keep(checkpointing, b * in * positions * e);
      resnet(z, count, of, name + ".0", in, out, positions);
      if (depth > 0) transformer(z, count, of, name + ".1", out, c.context_dim, depth, c.heads(out), positions);
      const bool upsample = level > 0 && j == c.num_res_blocks;
      if (upsample) {  // nearest x2 (kept by the convolution)
        count.keep(true, b * out * positions * 4 * e +
                             conv_adapter_bytes(of(upsample_path(c, level)), positions * 4, z));
      }
      add_segment(name, {name + "."}, count, checkpointing ? b * ch * positions * e : b * in * positions * e,
                  b * positions * (depth > 0 ? 8 * out : in) * e, checkpointing);
      ch = out;
      if (upsample) height *= 2, width *= 2;
    }
  }
  {
    const int64_t positions = height * width;
    Count count;  // GN and SiLU outputs, the output convolution; the prediction and target in f32 for the loss
    count.keep(true, 2 * b * ch * positions * e + b * c.out_channels * positions * (e + 2 * 4));
    add_segment("out", {"out."}, count, b * ch * positions * e, b * ch * positions * e, false);
  }
  return profile;
}

}  // namespace wick::sdxl
