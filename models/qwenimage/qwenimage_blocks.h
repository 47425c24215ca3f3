// The layers of the Qwen-Image transformer with diffusers' module tree and parameter names
// (QwenImageTransformerBlock, its Attention and FeedForward), used by QwenImageTransformer
// (models/qwenimage/qwenimage.h); exposed for tests.
//
//   QwenImageBlock block(config);                                   // img_mod, txt_mod, attn, img_mlp, txt_mlp
//   auto [img2, txt2] = block.run(img, txt, {.temb = temb}, rope, mask);
//
// Conventions: tokens [B, L, dim]; temb = the timestep embedding [B, dim] (the modulation Linears read
// SiLU(temb)); rope = cos/sin tables of the joint sequence [text; image], [L_txt + L_img, 1, head_dim/2]
// f32; mask = U8 [B, 1, 1, L_txt + L_img] (1 = a key to attend to) or undefined. Every projection is an
// nn::Linear looked up by name at call time, so LoRA/DoRA wrappers on any of them take effect.
// Modulation chunks are (shift, scale, gate) for the attention, then the same for the MLP; the gates
// are not tanh'd.
#pragma once

#include <utility>

#include "engine/module.h"
#include "models/qwenimage/qwenimage_config.h"
#include "runtime/ops/rope.h"

namespace wick::qwenimage {

// The block's timestep inputs. temb_zero (Edit-2511's zero_cond_t) is the embedding of t = 0: image
// tokens from n_target on (the reference images') are modulated by it, the target's by temb; the
// text stream always by temb. Undefined: every image token by temb.
struct BlockTime {
  Tensor temb;
  Tensor temb_zero;
  int64_t n_target = 0;
};

// Children to_q, to_k, to_v, to_out ("0"), add_q_proj, add_k_proj, add_v_proj, to_add_out (all with
// bias) and norm_q, norm_k, norm_added_q, norm_added_k (RMSNorm over the head width, eps 1e-6).
class QwenImageAttention : public Module {
 public:
  explicit QwenImageAttention(const QwenImageConfig& config);
  std::string type_name() const override { return "Attention"; }
  // img [B, N, dim], txt [B, L, dim] (both modulated) -> (to_out(attended img), to_add_out(attended txt))
  // of one attention over [txt; img] with RoPE on q and k after the QK norms.
  std::pair<Tensor, Tensor> run(const Tensor& img, const Tensor& txt, const RopeTables& rope, const Tensor& mask);

 private:
  int64_t n_heads_;
};

// Child net: "0" (a GELU module whose child proj is Linear(dim -> mlp_hidden)) and "2"
// (Linear(mlp_hidden -> dim)); forward = net.2(GELU_tanh(net.0.proj(x))).
class QwenImageFeedForward : public Module {
 public:
  explicit QwenImageFeedForward(const QwenImageConfig& config);
  std::string type_name() const override { return "FeedForward"; }
  Tensor forward(const Tensor& x) override;
};

// Children img_mod, txt_mod (Sequential: "0" SiLU, "1" Linear(dim -> 6 dim)), attn, img_mlp, txt_mlp.
//   x_n = LayerNorm(x)(1 + scale1) + shift1;  x += gate1 * attention(x_n)    (each stream)
//   x_n = LayerNorm(x)(1 + scale2) + shift2;  x += gate2 * mlp(x_n)
// LayerNorms without affine parameters, eps 1e-6.
class QwenImageBlock : public Module {
 public:
  explicit QwenImageBlock(const QwenImageConfig& config);
  std::string type_name() const override { return "QwenImageTransformerBlock"; }
  // img [B, N, dim], txt [B, L, dim] -> (img, txt).
  std::pair<Tensor, Tensor> run(const Tensor& img, const Tensor& txt, const BlockTime& time, const RopeTables& rope,
                                const Tensor& mask);
};

// Child timestep_embedder (linear_1: 256 -> dim, SiLU, linear_2: dim -> dim); forward: sinusoidal
// features [B, 256] -> temb [B, dim].
class QwenTimestepEmbedding : public Module {
 public:
  explicit QwenTimestepEmbedding(const QwenImageConfig& config);
  std::string type_name() const override { return "QwenTimestepProjEmbeddings"; }
  Tensor forward(const Tensor& features) override;
};

// AdaLayerNormContinuous: child linear (dim -> 2 dim); run(x, temb) = LayerNorm(x)(1 + scale) + shift
// with (scale, shift) = chunk(linear(SiLU(temb)), 2): scale first, unlike the blocks.
class QwenImageNormOut : public Module {
 public:
  explicit QwenImageNormOut(const QwenImageConfig& config);
  std::string type_name() const override { return "AdaLayerNormContinuous"; }
  Tensor run(const Tensor& x, const Tensor& temb);
};

}  // namespace wick::qwenimage
