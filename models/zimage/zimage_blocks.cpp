#include "models/zimage/zimage_blocks.h"

#include "engine/autograd/ops_attention.h"
#include "engine/autograd/ops_elementwise.h"
#include "engine/autograd/ops_join.h"
#include "engine/autograd/ops_layout.h"
#include "engine/autograd/ops_modulate.h"
#include "engine/autograd/ops_norm.h"
#include "engine/autograd/ops_rope.h"
#include "models/nn/basic.h"
#include "models/nn/linear.h"
#include "models/nn/norm.h"

namespace wick::zimage {
namespace {

constexpr double kQkNormEps = 1e-5;     // the attention's head RMSNorms (hard-coded by the authors)
constexpr double kFinalNormEps = 1e-6;  // the final layer's LayerNorm
constexpr int64_t kFrequencyDim = 256;

nn::LinearOptions linear_options(const ZImageConfig& c, bool bias) {
  return nn::LinearOptions{.bias = bias, .dtype = c.dtype, .device = c.device, .initialize = c.initialize};
}

std::shared_ptr<nn::Linear> linear(const ZImageConfig& c, int64_t in, int64_t out, bool bias) {
  return std::make_shared<nn::Linear>(in, out, linear_options(c, bias));
}

std::shared_ptr<nn::RMSNorm> rms_norm(const ZImageConfig& c, int64_t dim, double eps) {
  return std::make_shared<nn::RMSNorm>(dim, eps, /*affine=*/true, c.dtype, c.device);
}

// x [B, L, D] times (1 + scale) with scale [B, D].
Tensor scaled(const Tensor& x, const Tensor& scale) {
  return autograd::mul(x, autograd::unsqueeze(autograd::add(scale, 1.0), 1));
}

}  // namespace

ZImageAttention::ZImageAttention(const ZImageConfig& c) : n_heads_(c.n_heads) {
  register_module("to_q", linear(c, c.dim, c.dim, false));
  register_module("to_k", linear(c, c.dim, c.dim, false));
  register_module("to_v", linear(c, c.dim, c.dim, false));
  auto out = std::make_shared<nn::Sequential>();
  out->add(linear(c, c.dim, c.dim, false));
  register_module("to_out", out);
  register_module("norm_q", rms_norm(c, c.head_dim(), kQkNormEps));
  register_module("norm_k", rms_norm(c, c.head_dim(), kQkNormEps));
}

Tensor ZImageAttention::run(const Tensor& x, const RopeTables& rope, const Tensor& mask) {
  const int64_t batch = x.size(0), length = x.size(1), width = x.size(2);
  auto heads = [&](const char* name) {
    return autograd::reshape(child(name)->forward(x), {batch, length, n_heads_, width / n_heads_});
  };
  // [B, L, H, D] with tables [B, L, 1, D/2]; SDPA reads [B, H, L, D] as transposed views.
  Tensor q = autograd::apply_rope(child("norm_q")->forward(heads("to_q")), rope.cos, rope.sin);
  Tensor k = autograd::apply_rope(child("norm_k")->forward(heads("to_k")), rope.cos, rope.sin);
  Tensor v = heads("to_v");
  Tensor out = autograd::scaled_dot_product_attention(autograd::transpose(q, 1, 2), autograd::transpose(k, 1, 2),
                                                      autograd::transpose(v, 1, 2), mask);
  out = autograd::reshape(autograd::transpose(out, 1, 2), {batch, length, width});
  return child("to_out")->child("0")->forward(out);
}

FeedForward::FeedForward(const ZImageConfig& c) {
  register_module("w1", linear(c, c.dim, c.ffn_hidden, false));
  register_module("w2", linear(c, c.ffn_hidden, c.dim, false));
  register_module("w3", linear(c, c.dim, c.ffn_hidden, false));
}

Tensor FeedForward::forward(const Tensor& x) {
  return child("w2")->forward(autograd::mul(autograd::silu(child("w1")->forward(x)), child("w3")->forward(x)));
}

ZImageBlock::ZImageBlock(const ZImageConfig& c, bool modulated) : modulated_(modulated) {
  register_module("attention", std::make_shared<ZImageAttention>(c));
  register_module("feed_forward", std::make_shared<FeedForward>(c));
  for (const char* norm : {"attention_norm1", "attention_norm2", "ffn_norm1", "ffn_norm2"})
    register_module(norm, rms_norm(c, c.dim, c.norm_eps));
  if (modulated) {
    auto modulation = std::make_shared<nn::Sequential>();
    modulation->add(linear(c, c.adaln_dim(), 4 * c.dim, true));
    register_module("adaLN_modulation", modulation);
  }
}

Tensor ZImageBlock::run(const Tensor& x, const Tensor& adaln, const RopeTables& rope, const Tensor& mask) {
  WICK_CHECK(modulated_ == adaln.defined(), "Z-Image block: ", modulated_ ? "a modulated" : "an unmodulated",
             " block takes ", modulated_ ? "the adaLN input c" : "no adaLN input");
  auto* attention = static_cast<ZImageAttention*>(child("attention").get());
  if (!modulated_) {
    Tensor h = autograd::add(
        x, child("attention_norm2")->forward(attention->run(child("attention_norm1")->forward(x), rope, mask)));
    return autograd::add(h,
                         child("ffn_norm2")->forward(child("feed_forward")->forward(child("ffn_norm1")->forward(h))));
  }
  // scale_msa, gate_msa, scale_mlp, gate_mlp
  std::vector<Tensor> mod = autograd::chunk(child("adaLN_modulation")->child("0")->forward(adaln), 4, 1);
  Tensor attended = attention->run(scaled(child("attention_norm1")->forward(x), mod[0]), rope, mask);
  Tensor h = autograd::gated_residual(x, autograd::tanh(mod[1]), child("attention_norm2")->forward(attended));
  Tensor fed = child("feed_forward")->forward(scaled(child("ffn_norm1")->forward(h), mod[2]));
  return autograd::gated_residual(h, autograd::tanh(mod[3]), child("ffn_norm2")->forward(fed));
}

FinalLayer::FinalLayer(const ZImageConfig& c) {
  register_module("linear", linear(c, c.dim, c.patch_features(), true));
  auto modulation = std::make_shared<nn::Sequential>();
  modulation->add(std::make_shared<nn::Activation>("silu"));
  modulation->add(linear(c, c.adaln_dim(), c.dim, true));
  register_module("adaLN_modulation", modulation);
}

Tensor FinalLayer::run(const Tensor& x, const Tensor& adaln) {
  Tensor scale = child("adaLN_modulation")->forward(adaln);
  Tensor normed = autograd::layer_norm(x, {x.size(-1)}, Tensor(), Tensor(), kFinalNormEps);
  return child("linear")->forward(scaled(normed, scale));
}

TimestepEmbedder::TimestepEmbedder(const ZImageConfig& c) {
  auto mlp = std::make_shared<nn::Sequential>();
  mlp->add(linear(c, kFrequencyDim, c.t_hidden, true));
  mlp->add(std::make_shared<nn::Activation>("silu"));
  mlp->add(linear(c, c.t_hidden, c.adaln_dim(), true));
  register_module("mlp", mlp);
}

Tensor TimestepEmbedder::forward(const Tensor& features) { return child("mlp")->forward(features); }

}  // namespace wick::zimage
