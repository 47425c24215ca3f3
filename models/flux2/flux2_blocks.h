// The layers of the FLUX.2 transformer (Black Forest Labs' flux2 model.py, its parameter names), used by
// Flux2Transformer (models/flux2/flux2.h). Built like Flux.1's, on the same BFL layers (models/nn/bfl_layers.h:
// QK-norm, head split, joint attention, modulation), with FLUX.2's differences: no biases anywhere, a SwiGLU MLP
// (silu of the first half times the second), and no modulation of their own: three Modulation layers of
// the transformer, computed once per forward, feed every block.
//
//   DoubleStreamBlock block(config);                               // img_attn, img_mlp, txt_attn, txt_mlp
//   auto [img2, txt2] = block.run(img, txt, img_mod, txt_mod, rope);
//   SingleStreamBlock single(config);                              // linear1, linear2, norm
//   Tensor x2 = single.run(cat(txt, img), single_mod, rope);
//
// Conventions: tokens [B, L, hidden]; a modulation is the chunks of its Linear, in BFL's order
// ((shift, scale, gate) x 2 for the double stream, (shift, scale, gate) for the single stream), each
// [B, hidden]; rope = the cos/sin tables of the joint sequence (text first), [L, 1, head_dim / 2] f32.
// Every projection is an nn::Linear looked up by name at call time, so LoRA/DoRA wrappers on any of
// them take effect.
#pragma once

#include <utility>
#include <vector>

#include "engine/module.h"
#include "models/flux2/flux2_config.h"
#include "models/nn/linear.h"
#include "runtime/ops/rope.h"

namespace wick::flux2 {

// The options of every FLUX.2 Linear: no bias, the config's dtype and device.
nn::LinearOptions linear_options(const Flux2Config& config);

// silu(x[..., :n]) · x[..., n:] for x [..., 2n] (BFL's SiLUActivation).
Tensor swiglu(const Tensor& x);

class DoubleStreamBlock : public Module {
 public:
  explicit DoubleStreamBlock(const Flux2Config& config);
  std::string type_name() const override { return "DoubleStreamBlock"; }
  // img [B, L_img, hidden], txt [B, L_txt, hidden], img_mod / txt_mod the six chunks of
  // double_stream_modulation_img / _txt -> (img, txt) after joint attention over [txt; img] and each
  // stream's MLP, every branch gated.
  std::pair<Tensor, Tensor> run(const Tensor& img, const Tensor& txt, const std::vector<Tensor>& img_mod,
                                const std::vector<Tensor>& txt_mod, const RopeTables& rope);

 private:
  int64_t n_heads_;
};

class SingleStreamBlock : public Module {
 public:
  explicit SingleStreamBlock(const Flux2Config& config);
  std::string type_name() const override { return "SingleStreamBlock"; }
  // x [B, L_txt + L_img, hidden], mod the three chunks of single_stream_modulation ->
  // x + gate · linear2([attention; swiglu(mlp)]).
  Tensor run(const Tensor& x, const std::vector<Tensor>& mod, const RopeTables& rope);

 private:
  int64_t n_heads_, hidden_, mlp_hidden_;
};

}  // namespace wick::flux2
