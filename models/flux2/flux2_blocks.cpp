#include "models/flux2/flux2_blocks.h"

#include "engine/autograd/ops_elementwise.h"
#include "engine/autograd/ops_join.h"
#include "engine/autograd/ops_layout.h"
#include "engine/autograd/ops_modulate.h"
#include "engine/autograd/ops_norm.h"
#include "models/nn/bfl_layers.h"

namespace wick::flux2 {
namespace {

constexpr double kNormEps = 1e-6;

// LayerNorm without affine parameters (BFL's img_norm1/2, txt_norm1/2, pre_norm, norm_final), eps 1e-6.
Tensor layer_norm(const Tensor& x) { return autograd::layer_norm(x, {x.size(-1)}, Tensor(), Tensor(), kNormEps); }

// Children qkv (hidden -> 3·hidden), norm (QKNorm over the head width), proj (hidden -> hidden); the
// double block drives them (the streams attend jointly).
class SelfAttention : public Module {
 public:
  explicit SelfAttention(const Flux2Config& c) {
    register_module("qkv", std::make_shared<nn::Linear>(c.hidden_size, 3 * c.hidden_size, linear_options(c)));
    register_module("norm", std::make_shared<nn::QKNorm>(c.head_dim(), c.dtype, c.device));
    register_module("proj", std::make_shared<nn::Linear>(c.hidden_size, c.hidden_size, linear_options(c)));
  }
  std::string type_name() const override { return "SelfAttention"; }
};

// Children "0" Linear(hidden, 2·mlp) and "2" Linear(mlp, hidden), as BFL's nn.Sequential (whose "1",
// the SwiGLU, holds no parameter); run applies them around swiglu.
class SwiGluMlp : public Module {
 public:
  explicit SwiGluMlp(const Flux2Config& c) {
    register_module("0", std::make_shared<nn::Linear>(c.hidden_size, 2 * c.mlp_hidden(), linear_options(c)));
    register_module("2", std::make_shared<nn::Linear>(c.mlp_hidden(), c.hidden_size, linear_options(c)));
  }
  std::string type_name() const override { return "SwiGluMlp"; }
  Tensor forward(const Tensor& x) override { return child("2")->forward(swiglu(child("0")->forward(x))); }
};

}  // namespace

nn::LinearOptions linear_options(const Flux2Config& c) {
  return nn::LinearOptions{.bias = false, .dtype = c.dtype, .device = c.device, .initialize = c.initialize};
}

Tensor swiglu(const Tensor& x) {
  const int64_t n = x.size(-1) / 2;
  WICK_CHECK(x.size(-1) == 2 * n && n > 0, "FLUX.2 swiglu: ", x.describe(), " has no even, non-empty last axis");
  return autograd::mul(autograd::silu(autograd::narrow(x, -1, 0, n)), autograd::narrow(x, -1, n, n));
}

DoubleStreamBlock::DoubleStreamBlock(const Flux2Config& c) : n_heads_(c.num_heads) {
  register_module("img_attn", std::make_shared<SelfAttention>(c));
  register_module("img_mlp", std::make_shared<SwiGluMlp>(c));
  register_module("txt_attn", std::make_shared<SelfAttention>(c));
  register_module("txt_mlp", std::make_shared<SwiGluMlp>(c));
}

std::pair<Tensor, Tensor> DoubleStreamBlock::run(const Tensor& img, const Tensor& txt,
                                                 const std::vector<Tensor>& img_mod,
                                                 const std::vector<Tensor>& txt_mod, const RopeTables& rope) {
  WICK_CHECK(img_mod.size() == 6 && txt_mod.size() == 6, "FLUX.2 double block: the modulations have ",
             img_mod.size(), " and ", txt_mod.size(), " chunks, not 6");
  struct Stream {
    Tensor x;
    Module* attn;
    Module* mlp;
    const std::vector<Tensor>* mod;  // shift1, scale1, gate1, shift2, scale2, gate2
    nn::HeadsQKV heads;
  };
  Stream streams[2] = {{txt, child("txt_attn").get(), child("txt_mlp").get(), &txt_mod, {}},
                       {img, child("img_attn").get(), child("img_mlp").get(), &img_mod, {}}};
  for (Stream& s : streams) {
    const std::vector<Tensor>& mod = *s.mod;
    Tensor modulated = autograd::modulate(layer_norm(s.x), mod[0], mod[1]);
    s.heads = nn::split_heads(s.attn->child("qkv")->forward(modulated), n_heads_, *s.attn->child("norm"));
  }
  // Joint attention over [txt; img] (text first, as the position ids), then split back.
  const nn::HeadsQKV &t = streams[0].heads, &i = streams[1].heads;
  Tensor attended = nn::joint_attention(autograd::concat({t.q, i.q}, 1), autograd::concat({t.k, i.k}, 1),
                                          autograd::concat({t.v, i.v}, 1), rope);
  const int64_t n_txt = txt.size(1);
  Tensor parts[2] = {autograd::narrow(attended, 1, 0, n_txt), autograd::narrow(attended, 1, n_txt, img.size(1))};
  for (int s_index = 0; s_index < 2; ++s_index) {
    Stream& s = streams[s_index];
    const std::vector<Tensor>& mod = *s.mod;
    Tensor x = autograd::gated_residual(s.x, mod[2], s.attn->child("proj")->forward(parts[s_index]));
    Tensor h = autograd::modulate(layer_norm(x), mod[3], mod[4]);
    s.x = autograd::gated_residual(x, mod[5], s.mlp->forward(h));
  }
  return {streams[1].x, streams[0].x};
}

SingleStreamBlock::SingleStreamBlock(const Flux2Config& c)
    : n_heads_(c.num_heads), hidden_(c.hidden_size), mlp_hidden_(c.mlp_hidden()) {
  register_module("linear1", std::make_shared<nn::Linear>(hidden_, 3 * hidden_ + 2 * mlp_hidden_, linear_options(c)));
  register_module("linear2", std::make_shared<nn::Linear>(hidden_ + mlp_hidden_, hidden_, linear_options(c)));
  register_module("norm", std::make_shared<nn::QKNorm>(c.head_dim(), c.dtype, c.device));
}

Tensor SingleStreamBlock::run(const Tensor& x, const std::vector<Tensor>& mod, const RopeTables& rope) {
  WICK_CHECK(mod.size() == 3, "FLUX.2 single block: the modulation has ", mod.size(), " chunks, not 3");
  Tensor fused = child("linear1")->forward(autograd::modulate(layer_norm(x), mod[0], mod[1]));
  // [qkv | mlp gate | mlp value] along the features: views of the one linear1 output.
  nn::HeadsQKV heads = nn::split_heads(autograd::narrow(fused, -1, 0, 3 * hidden_), n_heads_, *child("norm"));
  Tensor mlp = swiglu(autograd::narrow(fused, -1, 3 * hidden_, 2 * mlp_hidden_));
  Tensor attended = nn::joint_attention(heads.q, heads.k, heads.v, rope);
  return autograd::gated_residual(x, mod[2], child("linear2")->forward(autograd::concat({attended, mlp}, 2)));
}

}  // namespace wick::flux2
