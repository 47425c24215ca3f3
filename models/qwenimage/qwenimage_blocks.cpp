#include "models/qwenimage/qwenimage_blocks.h"

#include <vector>

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

namespace wick::qwenimage {
namespace {

constexpr double kNormEps = 1e-6;  // the QK RMSNorms and every LayerNorm
constexpr int64_t kFrequencyDim = 256;

std::shared_ptr<nn::Linear> linear(const QwenImageConfig& c, int64_t in, int64_t out) {
  return std::make_shared<nn::Linear>(
      in, out, nn::LinearOptions{.bias = true, .dtype = c.dtype, .device = c.device, .initialize = c.initialize});
}

Tensor layer_norm(const Tensor& x) { return autograd::layer_norm(x, {x.size(-1)}, Tensor(), Tensor(), kNormEps); }

// diffusers' GELU module: child proj, then the tanh approximation.
class GeluProjection : public Module {
 public:
  explicit GeluProjection(const QwenImageConfig& c) { register_module("proj", linear(c, c.dim, c.mlp_hidden)); }
  std::string type_name() const override { return "GELU"; }
  Tensor forward(const Tensor& x) override { return autograd::gelu_tanh(child("proj")->forward(x)); }
};

// FeedForward.net: "0" the GELU projection, "1" a dropout without parameters (not held), "2" the output Linear.
class FeedForwardNet : public Module {
 public:
  explicit FeedForwardNet(const QwenImageConfig& c) {
    register_module("0", std::make_shared<GeluProjection>(c));
    register_module("2", linear(c, c.mlp_hidden, c.dim));
  }
  std::string type_name() const override { return "ModuleList"; }
};

// diffusers' TimestepEmbedding: linear_1 (256 -> dim), SiLU, linear_2 (dim -> dim).
class TimestepMlp : public Module {
 public:
  explicit TimestepMlp(const QwenImageConfig& c) {
    register_module("linear_1", linear(c, kFrequencyDim, c.dim));
    register_module("linear_2", linear(c, c.dim, c.dim));
  }
  std::string type_name() const override { return "TimestepEmbedding"; }
  Tensor forward(const Tensor& x) override {
    return child("linear_2")->forward(autograd::silu(child("linear_1")->forward(x)));
  }
};

std::shared_ptr<nn::Sequential> modulation(const QwenImageConfig& c) {
  auto mod = std::make_shared<nn::Sequential>();
  mod->add(std::make_shared<nn::Activation>("silu"));
  mod->add(linear(c, c.dim, 6 * c.dim));
  return mod;
}

// One stream's six modulation vectors [B, dim] (shift1, scale1, gate1, shift2, scale2, gate2).
std::vector<Tensor> chunks(Module& mod, const Tensor& temb) { return autograd::chunk(mod.forward(temb), 6, 1); }

// modulate / gated_residual with the first n tokens under `a` and the rest under `b` (zero_cond_t), or
// all under `a` when b is empty.
Tensor modulate_split(const Tensor& x, const std::vector<Tensor>& a, const std::vector<Tensor>& b, int64_t part,
                      int64_t n) {
  if (b.empty()) return autograd::modulate(x, a[part], a[part + 1]);
  const int64_t length = x.size(1);
  return autograd::concat({autograd::modulate(autograd::narrow(x, 1, 0, n), a[part], a[part + 1]),
                           autograd::modulate(autograd::narrow(x, 1, n, length - n), b[part], b[part + 1])},
                          1);
}

Tensor gated_split(const Tensor& x, const std::vector<Tensor>& a, const std::vector<Tensor>& b, int64_t part,
                   const Tensor& f, int64_t n) {
  if (b.empty()) return autograd::gated_residual(x, a[part], f);
  const int64_t length = x.size(1);
  return autograd::concat(
      {autograd::gated_residual(autograd::narrow(x, 1, 0, n), a[part], autograd::narrow(f, 1, 0, n)),
       autograd::gated_residual(autograd::narrow(x, 1, n, length - n), b[part], autograd::narrow(f, 1, n, length - n))},
      1);
}

}  // namespace

QwenImageAttention::QwenImageAttention(const QwenImageConfig& c) : n_heads_(c.n_heads) {
  for (const char* name : {"to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out"})
    register_module(name, linear(c, c.dim, c.dim));
  auto out = std::make_shared<nn::Sequential>();
  out->add(linear(c, c.dim, c.dim));
  register_module("to_out", out);
  for (const char* norm : {"norm_q", "norm_k", "norm_added_q", "norm_added_k"})
    register_module(norm, std::make_shared<nn::RMSNorm>(c.head_dim(), kNormEps, /*affine=*/true, c.dtype, c.device));
}

std::pair<Tensor, Tensor> QwenImageAttention::run(const Tensor& img, const Tensor& txt, const RopeTables& rope,
                                                  const Tensor& mask) {
  const int64_t batch = img.size(0), n_img = img.size(1), n_txt = txt.size(1), width = img.size(2);
  auto heads = [&](const char* name, const Tensor& x, const char* norm) {
    Tensor h = autograd::reshape(child(name)->forward(x), {batch, x.size(1), n_heads_, width / n_heads_});
    return norm ? child(norm)->forward(h) : h;
  };
  // Joint [txt; img] sequences [B, L, H, D]; RoPE with tables [L, 1, D/2]; SDPA reads [B, H, L, D] views.
  Tensor q = autograd::concat({heads("add_q_proj", txt, "norm_added_q"), heads("to_q", img, "norm_q")}, 1);
  Tensor k = autograd::concat({heads("add_k_proj", txt, "norm_added_k"), heads("to_k", img, "norm_k")}, 1);
  Tensor v = autograd::concat({heads("add_v_proj", txt, nullptr), heads("to_v", img, nullptr)}, 1);
  q = autograd::apply_rope(q, rope.cos, rope.sin);
  k = autograd::apply_rope(k, rope.cos, rope.sin);
  Tensor out = autograd::scaled_dot_product_attention(autograd::transpose(q, 1, 2), autograd::transpose(k, 1, 2),
                                                      autograd::transpose(v, 1, 2), mask);
  out = autograd::reshape(autograd::transpose(out, 1, 2), {batch, n_txt + n_img, width});
  return {child("to_out")->child("0")->forward(autograd::narrow(out, 1, n_txt, n_img)),
          child("to_add_out")->forward(autograd::narrow(out, 1, 0, n_txt))};
}

QwenImageFeedForward::QwenImageFeedForward(const QwenImageConfig& c) {
  register_module("net", std::make_shared<FeedForwardNet>(c));
}

Tensor QwenImageFeedForward::forward(const Tensor& x) {
  Module& net = *child("net");
  return net.child("2")->forward(net.child("0")->forward(x));
}

QwenImageBlock::QwenImageBlock(const QwenImageConfig& c) {
  register_module("img_mod", modulation(c));
  register_module("attn", std::make_shared<QwenImageAttention>(c));
  register_module("img_mlp", std::make_shared<QwenImageFeedForward>(c));
  register_module("txt_mod", modulation(c));
  register_module("txt_mlp", std::make_shared<QwenImageFeedForward>(c));
}

std::pair<Tensor, Tensor> QwenImageBlock::run(const Tensor& img, const Tensor& txt, const BlockTime& time,
                                              const RopeTables& rope, const Tensor& mask) {
  const std::vector<Tensor> img_mod = chunks(*child("img_mod"), time.temb);
  const std::vector<Tensor> img_mod_zero =
      time.temb_zero.defined() ? chunks(*child("img_mod"), time.temb_zero) : std::vector<Tensor>{};
  const std::vector<Tensor> txt_mod = chunks(*child("txt_mod"), time.temb);
  const int64_t n = time.n_target;

  auto* attn = static_cast<QwenImageAttention*>(child("attn").get());
  auto [img_attended, txt_attended] =
      attn->run(modulate_split(layer_norm(img), img_mod, img_mod_zero, 0, n),
                autograd::modulate(layer_norm(txt), txt_mod[0], txt_mod[1]), rope, mask);
  Tensor x = gated_split(img, img_mod, img_mod_zero, 2, img_attended, n);
  Tensor t = autograd::gated_residual(txt, txt_mod[2], txt_attended);
  Tensor x_mlp = child("img_mlp")->forward(modulate_split(layer_norm(x), img_mod, img_mod_zero, 3, n));
  Tensor t_mlp = child("txt_mlp")->forward(autograd::modulate(layer_norm(t), txt_mod[3], txt_mod[4]));
  return {gated_split(x, img_mod, img_mod_zero, 5, x_mlp, n), autograd::gated_residual(t, txt_mod[5], t_mlp)};
}

QwenTimestepEmbedding::QwenTimestepEmbedding(const QwenImageConfig& c) {
  register_module("timestep_embedder", std::make_shared<TimestepMlp>(c));
}

Tensor QwenTimestepEmbedding::forward(const Tensor& features) { return child("timestep_embedder")->forward(features); }

QwenImageNormOut::QwenImageNormOut(const QwenImageConfig& c) { register_module("linear", linear(c, c.dim, 2 * c.dim)); }

Tensor QwenImageNormOut::run(const Tensor& x, const Tensor& temb) {
  std::vector<Tensor> mod = autograd::chunk(child("linear")->forward(autograd::silu(temb)), 2, 1);  // scale, shift
  return autograd::modulate(layer_norm(x), mod[1], mod[0]);
}

}  // namespace wick::qwenimage
