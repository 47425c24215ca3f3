#include "models/flux/flux_blocks.h"

#include "engine/autograd/ops_elementwise.h"
#include "engine/autograd/ops_join.h"
#include "engine/autograd/ops_layout.h"
#include "engine/autograd/ops_modulate.h"
#include "engine/autograd/ops_norm.h"
#include "models/nn/basic.h"
#include "models/nn/linear.h"

namespace wick::flux {
namespace {

constexpr double kNormEps = 1e-6;

nn::LinearOptions linear_options(const FluxConfig& c, bool bias = true) {
  return nn::LinearOptions{.bias = bias, .dtype = c.dtype, .device = c.device, .initialize = c.initialize};
}

// LayerNorm without affine parameters (BFL's norm1/norm2/pre_norm/norm_final), eps 1e-6.
Tensor layer_norm(const Tensor& x) { return autograd::layer_norm(x, {x.size(-1)}, Tensor(), Tensor(), kNormEps); }

// [Linear(hidden, mlp), GELU(tanh), Linear(mlp, hidden)] named 0, 1, 2 (img_mlp / txt_mlp).
std::shared_ptr<nn::Sequential> make_mlp(const FluxConfig& c) {
  auto mlp = std::make_shared<nn::Sequential>();
  mlp->add(std::make_shared<nn::Linear>(c.hidden_size, c.mlp_hidden(), linear_options(c)));
  mlp->add(std::make_shared<nn::Activation>("gelu_tanh"));
  mlp->add(std::make_shared<nn::Linear>(c.mlp_hidden(), c.hidden_size, linear_options(c)));
  return mlp;
}

}  // namespace

SelfAttention::SelfAttention(const FluxConfig& c) {
  register_module("qkv", std::make_shared<nn::Linear>(c.hidden_size, 3 * c.hidden_size, linear_options(c, c.qkv_bias)));
  register_module("norm", std::make_shared<QKNorm>(c.head_dim(), c.dtype, c.device));
  register_module("proj", std::make_shared<nn::Linear>(c.hidden_size, c.hidden_size, linear_options(c)));
}

DoubleStreamBlock::DoubleStreamBlock(const FluxConfig& c) : n_heads_(c.num_heads) {
  register_module("img_mod", std::make_shared<Modulation>(c.hidden_size, 6, linear_options(c)));
  register_module("img_attn", std::make_shared<SelfAttention>(c));
  register_module("img_mlp", make_mlp(c));
  register_module("txt_mod", std::make_shared<Modulation>(c.hidden_size, 6, linear_options(c)));
  register_module("txt_attn", std::make_shared<SelfAttention>(c));
  register_module("txt_mlp", make_mlp(c));
}

std::pair<Tensor, Tensor> DoubleStreamBlock::run(const Tensor& img, const Tensor& txt, const Tensor& silu_vec,
                                                 const RopeTables& rope) {
  struct Stream {
    Tensor x;
    Module* attn;
    Module* mlp;
    std::vector<Tensor> mod;  // shift1, scale1, gate1, shift2, scale2, gate2
    HeadsQKV heads;
  };
  Stream streams[2] = {{txt, child("txt_attn").get(), child("txt_mlp").get(), {}, {}},
                       {img, child("img_attn").get(), child("img_mlp").get(), {}, {}}};
  streams[0].mod = static_cast<Modulation*>(child("txt_mod").get())->chunks(silu_vec);
  streams[1].mod = static_cast<Modulation*>(child("img_mod").get())->chunks(silu_vec);
  for (Stream& s : streams) {
    Tensor modulated = autograd::modulate(layer_norm(s.x), s.mod[0], s.mod[1]);
    s.heads = split_heads(s.attn->child("qkv")->forward(modulated), n_heads_, *s.attn->child("norm"));
  }
  // Joint attention over [txt; img] (text first, as the position ids), then split back.
  const HeadsQKV &t = streams[0].heads, &i = streams[1].heads;
  Tensor attended = joint_attention(autograd::concat({t.q, i.q}, 1), autograd::concat({t.k, i.k}, 1),
                                    autograd::concat({t.v, i.v}, 1), rope);
  const int64_t n_txt = txt.size(1);
  Tensor parts[2] = {autograd::narrow(attended, 1, 0, n_txt), autograd::narrow(attended, 1, n_txt, img.size(1))};
  for (int s_index = 0; s_index < 2; ++s_index) {
    Stream& s = streams[s_index];
    Tensor x = autograd::gated_residual(s.x, s.mod[2], s.attn->child("proj")->forward(parts[s_index]));
    Tensor h = autograd::modulate(layer_norm(x), s.mod[3], s.mod[4]);
    s.x = autograd::gated_residual(x, s.mod[5], s.mlp->forward(h));
  }
  return {streams[1].x, streams[0].x};
}

SingleStreamBlock::SingleStreamBlock(const FluxConfig& c)
    : n_heads_(c.num_heads), hidden_(c.hidden_size), mlp_hidden_(c.mlp_hidden()) {
  register_module("linear1", std::make_shared<nn::Linear>(hidden_, 3 * hidden_ + mlp_hidden_, linear_options(c)));
  register_module("linear2", std::make_shared<nn::Linear>(hidden_ + mlp_hidden_, hidden_, linear_options(c)));
  register_module("norm", std::make_shared<QKNorm>(c.head_dim(), c.dtype, c.device));
  register_module("modulation", std::make_shared<Modulation>(hidden_, 3, linear_options(c)));
}

Tensor SingleStreamBlock::run(const Tensor& x, const Tensor& silu_vec, const RopeTables& rope) {
  // shift, scale, gate
  std::vector<Tensor> mod = static_cast<Modulation*>(child("modulation").get())->chunks(silu_vec);
  Tensor fused = child("linear1")->forward(autograd::modulate(layer_norm(x), mod[0], mod[1]));
  // [qkv | mlp] along the features: views of the one linear1 output.
  HeadsQKV heads = split_heads(autograd::narrow(fused, -1, 0, 3 * hidden_), n_heads_, *child("norm"));
  Tensor mlp = autograd::gelu_tanh(autograd::narrow(fused, -1, 3 * hidden_, mlp_hidden_));
  Tensor attended = joint_attention(heads.q, heads.k, heads.v, rope);
  return autograd::gated_residual(x, mod[2], child("linear2")->forward(autograd::concat({attended, mlp}, 2)));
}

}  // namespace wick::flux
