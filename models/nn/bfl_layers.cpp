#include "models/nn/bfl_layers.h"

#include "engine/autograd/ops_attention.h"
#include "engine/autograd/ops_elementwise.h"
#include "engine/autograd/ops_join.h"
#include "engine/autograd/ops_layout.h"
#include "engine/autograd/ops_modulate.h"
#include "engine/autograd/ops_norm.h"
#include "engine/autograd/ops_rope.h"
#include "models/nn/basic.h"
#include "runtime/ops/creation.h"

namespace wick::nn {
namespace {

constexpr double kNormEps = 1e-6;  // BFL's RMSNorm and LayerNorm

}  // namespace

ScaledRMSNorm::ScaledRMSNorm(int64_t dim, DType dtype, Device device) {
  register_parameter("scale", &scale_, ones({dim}, dtype, device));
}

Tensor ScaledRMSNorm::forward(const Tensor& x) { return autograd::rms_norm(x, scale_, kNormEps); }

QKNorm::QKNorm(int64_t head_dim, DType dtype, Device device) {
  register_module("query_norm", std::make_shared<ScaledRMSNorm>(head_dim, dtype, device));
  register_module("key_norm", std::make_shared<ScaledRMSNorm>(head_dim, dtype, device));
}

MLPEmbedder::MLPEmbedder(int64_t in_dim, int64_t hidden, const LinearOptions& options) {
  register_module("in_layer", std::make_shared<Linear>(in_dim, hidden, options));
  register_module("out_layer", std::make_shared<Linear>(hidden, hidden, options));
}

Tensor MLPEmbedder::forward(const Tensor& x) {
  return child("out_layer")->forward(autograd::silu(child("in_layer")->forward(x)));
}

Modulation::Modulation(int64_t hidden, int64_t n, const LinearOptions& options) : n_(n) {
  register_module("lin", std::make_shared<Linear>(hidden, n * hidden, options));
}

std::vector<Tensor> Modulation::chunks(const Tensor& silu_vec) {
  return autograd::chunk(child("lin")->forward(silu_vec), n_, 1);
}

HeadsQKV split_heads(const Tensor& qkv, int64_t n_heads, Module& norm) {
  const int64_t width = qkv.size(-1) / 3;
  WICK_CHECK(qkv.dim() == 3 && qkv.size(-1) == 3 * width && width % n_heads == 0, "Flux: fused qkv ",
             qkv.describe(), " is not [B, L, 3 x ", n_heads, " heads x head_dim]");
  // (K H D) on the feature axis: a view [B, L, 3, H, D], then one [B, L, H, D] view per K.
  Tensor heads = autograd::reshape(qkv, {qkv.size(0), qkv.size(1), 3, n_heads, width / n_heads});
  HeadsQKV out;
  out.q = norm.child("query_norm")->forward(autograd::select(heads, 2, 0));
  out.k = norm.child("key_norm")->forward(autograd::select(heads, 2, 1));
  out.v = autograd::select(heads, 2, 2);
  return out;
}

Tensor joint_attention(const Tensor& q, const Tensor& k, const Tensor& v, const RopeTables& rope) {
  // [B, L, H, D] with tables [L, 1, D/2]; SDPA reads [B, H, L, D] as transposed views (no copy).
  Tensor q_rotated = autograd::transpose(autograd::apply_rope(q, rope.cos, rope.sin), 1, 2);
  Tensor k_rotated = autograd::transpose(autograd::apply_rope(k, rope.cos, rope.sin), 1, 2);
  Tensor out = autograd::scaled_dot_product_attention(q_rotated, k_rotated, autograd::transpose(v, 1, 2));
  return autograd::reshape(autograd::transpose(out, 1, 2), {q.size(0), q.size(1), q.size(2) * q.size(3)});
}

LastLayer::LastLayer(int64_t hidden, int64_t out, const LinearOptions& options) {
  register_module("linear", std::make_shared<Linear>(hidden, out, options));
  auto modulation = std::make_shared<Sequential>();
  modulation->add(std::make_shared<Activation>("silu"));
  modulation->add(std::make_shared<Linear>(hidden, 2 * hidden, options));
  register_module("adaLN_modulation", modulation);
}

Tensor LastLayer::run(const Tensor& img, const Tensor& silu_vec) {
  std::vector<Tensor> mod = autograd::chunk(child("adaLN_modulation")->child("1")->forward(silu_vec), 2, 1);
  const Tensor normed = autograd::layer_norm(img, {img.size(-1)}, Tensor(), Tensor(), kNormEps);
  return child("linear")->forward(autograd::modulate(normed, mod[0], mod[1]));  // shift, scale
}

}  // namespace wick::nn
