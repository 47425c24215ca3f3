#include "models/sd3/sd3_blocks.h"

#include "engine/autograd/ops_attention.h"
#include "engine/autograd/ops_elementwise.h"
#include "engine/autograd/ops_join.h"
#include "engine/autograd/ops_layout.h"
#include "engine/autograd/ops_modulate.h"
#include "engine/autograd/ops_norm.h"
#include "models/nn/basic.h"
#include "models/nn/linear.h"
#include "runtime/ops/creation.h"

namespace wick::sd3 {
namespace {

constexpr double kNormEps = 1e-6;

nn::LinearOptions linear_options(const Sd3Config& c) {
  return nn::LinearOptions{.bias = true, .dtype = c.dtype, .device = c.device, .initialize = c.initialize};
}

// LayerNorm without affine parameters (norm1, norm2, norm_final), eps 1e-6.
Tensor layer_norm(const Tensor& x) { return autograd::layer_norm(x, {x.size(-1)}, Tensor(), Tensor(), kNormEps); }

// [SiLU, Linear(hidden, n·hidden)] named "0", "1".
std::shared_ptr<nn::Sequential> make_modulation(const Sd3Config& c, int64_t n) {
  auto modulation = std::make_shared<nn::Sequential>();
  modulation->add(std::make_shared<nn::Activation>("silu"));
  modulation->add(std::make_shared<nn::Linear>(c.hidden_size, n * c.hidden_size, linear_options(c)));
  return modulation;
}

}  // namespace

RMSNorm::RMSNorm(int64_t dim, DType dtype, Device device) {
  register_parameter("weight", &weight_, ones({dim}, dtype, device));
}

Tensor RMSNorm::forward(const Tensor& x) { return autograd::rms_norm(x, weight_, kNormEps); }

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v) {
  // [B, L, H, D]; SDPA reads [B, H, L, D] as transposed views (no copy).
  Tensor out = autograd::scaled_dot_product_attention(autograd::transpose(q, 1, 2), autograd::transpose(k, 1, 2),
                                                      autograd::transpose(v, 1, 2));
  return autograd::reshape(autograd::transpose(out, 1, 2), {q.size(0), q.size(1), q.size(2) * q.size(3)});
}

SelfAttention::SelfAttention(const Sd3Config& c, bool with_proj) : n_heads_(c.num_heads) {
  register_module("qkv", std::make_shared<nn::Linear>(c.hidden_size, 3 * c.hidden_size, linear_options(c)));
  if (c.qk_norm) {
    register_module("ln_q", std::make_shared<RMSNorm>(c.head_dim(), c.dtype, c.device));
    register_module("ln_k", std::make_shared<RMSNorm>(c.head_dim(), c.dtype, c.device));
  }
  if (with_proj) register_module("proj", std::make_shared<nn::Linear>(c.hidden_size, c.hidden_size, linear_options(c)));
}

HeadsQKV SelfAttention::pre_attention(const Tensor& x, bool with_q) {
  Tensor qkv = child("qkv")->forward(x);
  const int64_t width = qkv.size(-1) / 3;
  // (K, H, D) on the feature axis: a view [B, L, 3, H, D], then one [B, L, H, D] view per K.
  Tensor heads = autograd::reshape(qkv, {qkv.size(0), qkv.size(1), 3, n_heads_, width / n_heads_});
  HeadsQKV out{with_q ? autograd::select(heads, 2, 0) : Tensor(), autograd::select(heads, 2, 1),
               autograd::select(heads, 2, 2)};
  if (auto ln_q = child("ln_q")) {
    if (with_q) out.q = ln_q->forward(out.q);
    out.k = child("ln_k")->forward(out.k);
  }
  return out;
}

Tensor SelfAttention::post_attention(const Tensor& attended) {
  WICK_CHECK(child("proj") != nullptr, "SD3: the pre-only context attention has no proj");
  return child("proj")->forward(attended);
}

Mlp::Mlp(const Sd3Config& c) {
  register_module("fc1", std::make_shared<nn::Linear>(c.hidden_size, c.mlp_hidden(), linear_options(c)));
  register_module("fc2", std::make_shared<nn::Linear>(c.mlp_hidden(), c.hidden_size, linear_options(c)));
}

Tensor Mlp::forward(const Tensor& x) {
  return child("fc2")->forward(autograd::gelu_tanh(child("fc1")->forward(x)));
}

DismantledBlock::DismantledBlock(const Sd3Config& c, bool pre_only, bool dual_attention)
    : pre_only_(pre_only), dual_(dual_attention) {
  WICK_CHECK(!(pre_only && dual_attention), "SD3: a pre-only block cannot have attn2");
  register_module("attn", std::make_shared<SelfAttention>(c, !pre_only));
  if (dual_attention) register_module("attn2", std::make_shared<SelfAttention>(c, true));
  if (!pre_only) register_module("mlp", std::make_shared<Mlp>(c));
  register_module("adaLN_modulation", make_modulation(c, pre_only ? 2 : dual_attention ? 9 : 6));
}

std::vector<Tensor> DismantledBlock::modulation(const Tensor& silu_c) {
  return autograd::chunk(child("adaLN_modulation")->child("1")->forward(silu_c), pre_only_ ? 2 : dual_ ? 9 : 6, 1);
}

JointBlock::JointBlock(const Sd3Config& c, int64_t index) : pre_only_(index == c.depth - 1) {
  register_module("context_block", std::make_shared<DismantledBlock>(c, pre_only_, false));
  register_module("x_block", std::make_shared<DismantledBlock>(c, false, c.dual_attention(index)));
}

std::pair<Tensor, Tensor> JointBlock::run(const Tensor& context, const Tensor& x, const Tensor& silu_c) {
  auto* ctx_block = static_cast<DismantledBlock*>(child("context_block").get());
  auto* x_block = static_cast<DismantledBlock*>(child("x_block").get());
  auto* ctx_attn = static_cast<SelfAttention*>(ctx_block->child("attn").get());
  auto* x_attn = static_cast<SelfAttention*>(x_block->child("attn").get());
  // Context: (shift, scale, gate) x 2, or (shift, scale) when pre-only. x: the same, then attn2's three.
  const std::vector<Tensor> ctx_mod = ctx_block->modulation(silu_c);
  const std::vector<Tensor> x_mod = x_block->modulation(silu_c);
  const HeadsQKV c =
      ctx_attn->pre_attention(autograd::modulate(layer_norm(context), ctx_mod[0], ctx_mod[1]), !pre_only_);
  const Tensor x_norm = layer_norm(x);
  const HeadsQKV i = x_attn->pre_attention(autograd::modulate(x_norm, x_mod[0], x_mod[1]));

  // Attention over [context; x]. The pre-only block's context rows are discarded, so only x's rows are
  // queried there (each query row is computed independently: the same result).
  const int64_t n_ctx = context.size(1), n_x = x.size(1);
  Tensor k = autograd::concat({c.k, i.k}, 1), v = autograd::concat({c.v, i.v}, 1);
  Tensor ctx_attended, x_attended;
  if (pre_only_) {
    x_attended = attention(i.q, k, v);
  } else {
    Tensor attended = attention(autograd::concat({c.q, i.q}, 1), k, v);
    ctx_attended = autograd::narrow(attended, 1, 0, n_ctx);
    x_attended = autograd::narrow(attended, 1, n_ctx, n_x);
  }

  Tensor x_out = autograd::gated_residual(x, x_mod[2], x_attn->post_attention(x_attended));
  if (x_block->dual_attention()) {
    auto* attn2 = static_cast<SelfAttention*>(x_block->child("attn2").get());
    const HeadsQKV i2 = attn2->pre_attention(autograd::modulate(x_norm, x_mod[6], x_mod[7]));
    x_out = autograd::gated_residual(x_out, x_mod[8], attn2->post_attention(attention(i2.q, i2.k, i2.v)));
  }
  const Tensor x_hidden = autograd::modulate(layer_norm(x_out), x_mod[3], x_mod[4]);
  x_out = autograd::gated_residual(x_out, x_mod[5], x_block->child("mlp")->forward(x_hidden));
  if (pre_only_) return {Tensor(), x_out};

  Tensor ctx_out = autograd::gated_residual(context, ctx_mod[2], ctx_attn->post_attention(ctx_attended));
  const Tensor ctx_hidden = autograd::modulate(layer_norm(ctx_out), ctx_mod[3], ctx_mod[4]);
  ctx_out = autograd::gated_residual(ctx_out, ctx_mod[5], ctx_block->child("mlp")->forward(ctx_hidden));
  return {ctx_out, x_out};
}

FinalLayer::FinalLayer(const Sd3Config& c) {
  register_module("linear", std::make_shared<nn::Linear>(c.hidden_size, c.out_features(), linear_options(c)));
  register_module("adaLN_modulation", make_modulation(c, 2));
}

Tensor FinalLayer::run(const Tensor& x, const Tensor& silu_c) {
  std::vector<Tensor> mod = autograd::chunk(child("adaLN_modulation")->child("1")->forward(silu_c), 2, 1);
  return child("linear")->forward(autograd::modulate(layer_norm(x), mod[0], mod[1]));  // shift, scale
}

}  // namespace wick::sd3
