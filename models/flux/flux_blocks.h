// The layers of the Flux.1 transformer (Black Forest Labs' modules and parameter names), used by
// FluxTransformer (models/flux/flux.h); exposed for tests and for other models built like Flux.
//
//   DoubleStreamBlock block(config);                       // img_mod, img_attn, img_mlp, txt_*
//   auto [img2, txt2] = block.run(img, txt, silu_vec, rope);
//   SingleStreamBlock single(config);                      // linear1, linear2, norm, modulation
//   Tensor x2 = single.run(cat(txt, img), silu_vec, rope);
//
// Conventions shared by every block: tokens [B, L, hidden]; silu_vec = SiLU(vec) [B, hidden],
// computed once per forward and fed to every modulation Linear; rope = the cos/sin tables of the
// joint sequence (text first), [L_txt + L_img, 1, head_dim / 2] f32, built once per forward.
// Every projection is an nn::Linear looked up by name at call time, so LoRA/DoRA wrappers
// (nn::apply_adapters) on any of them take effect. Modulation chunks are in BFL's order:
// (shift, scale, gate) x 2 in double blocks, (shift, scale, gate) in single blocks and
// (shift, scale) in the final layer.
#pragma once

#include <utility>
#include <vector>

#include "engine/module.h"
#include "models/flux/flux_config.h"
#include "models/nn/bfl_layers.h"
#include "models/nn/linear.h"
#include "runtime/ops/rope.h"

namespace wick::flux {

// BFL's shared layers (QKNorm, MLPEmbedder, Modulation, split_heads, joint_attention), which FLUX.2 uses too:
// models/nn/bfl_layers.h.
using nn::HeadsQKV;
using nn::joint_attention;
using nn::LastLayer;
using nn::MLPEmbedder;
using nn::Modulation;
using nn::QKNorm;
using nn::ScaledRMSNorm;
using nn::split_heads;

// Children qkv (hidden -> 3·hidden, bias = qkv_bias), norm (QKNorm), proj (hidden -> hidden). The
// double block drives them; there is no standalone forward (the streams attend jointly).
class SelfAttention : public Module {
 public:
  explicit SelfAttention(const FluxConfig& config);
  std::string type_name() const override { return "SelfAttention"; }
};

class DoubleStreamBlock : public Module {
 public:
  explicit DoubleStreamBlock(const FluxConfig& config);
  std::string type_name() const override { return "DoubleStreamBlock"; }
  // img [B, L_img, hidden], txt [B, L_txt, hidden] -> (img, txt) after joint attention over
  // [txt; img] and each stream's MLP, every branch gated.
  std::pair<Tensor, Tensor> run(const Tensor& img, const Tensor& txt, const Tensor& silu_vec, const RopeTables& rope);

 private:
  int64_t n_heads_;
};

class SingleStreamBlock : public Module {
 public:
  explicit SingleStreamBlock(const FluxConfig& config);
  std::string type_name() const override { return "SingleStreamBlock"; }
  // x [B, L_txt + L_img, hidden] -> x + gate · linear2([attention; GELU_tanh(mlp)]).
  Tensor run(const Tensor& x, const Tensor& silu_vec, const RopeTables& rope);

 private:
  int64_t n_heads_, hidden_, mlp_hidden_;
};

}  // namespace wick::flux
