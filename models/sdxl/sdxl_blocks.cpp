#include "models/sdxl/sdxl_blocks.h"

#include "engine/autograd/ops_attention.h"
#include "engine/autograd/ops_elementwise.h"
#include "engine/autograd/ops_join.h"
#include "engine/autograd/ops_layout.h"
#include "engine/autograd/ops_norm.h"
#include "models/nn/basic.h"
#include "models/nn/conv.h"
#include "models/nn/linear.h"
#include "models/nn/norm.h"
#include "models/vae/vae_blocks.h"

namespace wick::sdxl {
namespace {

constexpr double kResnetNormEps = 1e-5;       // sgm's GroupNorm32 (torch's default)
constexpr double kTransformerNormEps = 1e-6;  // sgm's attention.Normalize
constexpr double kLayerNormEps = 1e-5;

nn::LinearOptions linear_options(const UnetConfig& c, bool bias = true) {
  return nn::LinearOptions{.bias = bias, .dtype = c.dtype, .device = c.device, .initialize = c.initialize};
}

std::shared_ptr<nn::Conv2d> conv(const UnetConfig& c, int64_t in, int64_t out, int64_t kernel, int64_t stride = 1) {
  return std::make_shared<nn::Conv2d>(in, out, kernel,
                                      nn::Conv2dOptions{.stride = stride, .padding = kernel / 2, .dtype = c.dtype,
                                                        .device = c.device, .initialize = c.initialize});
}

std::shared_ptr<nn::GroupNorm> group_norm(const UnetConfig& c, int64_t channels, double eps) {
  return std::make_shared<nn::GroupNorm>(c.norm_groups, channels, eps, true, c.dtype, c.device);
}

// The GroupNorm child `norm` of a Sequential or block (its parameters, not its forward: the group count and eps are
// the block's).
Tensor apply_group_norm(const Module& norm, const Tensor& x, int64_t groups, double eps) {
  const auto& gn = static_cast<const nn::GroupNorm&>(norm);
  return autograd::group_norm(x, groups, gn.weight_, gn.bias_, eps);
}

// A container whose children the blocks call by name (ff, GEGLU, transformer_blocks).
class Holder : public Module {
 public:
  explicit Holder(std::string type) : type_(std::move(type)) {}
  std::string type_name() const override { return type_; }
  void add(const std::string& name, std::shared_ptr<Module> module) { register_module(name, std::move(module)); }

 private:
  std::string type_;
};

}  // namespace

ResBlock::ResBlock(const UnetConfig& c, int64_t in, int64_t out) : groups_(c.norm_groups) {
  auto in_layers = std::make_shared<nn::Sequential>();
  in_layers->add(group_norm(c, in, kResnetNormEps));
  in_layers->add(std::make_shared<nn::Activation>("silu"));
  in_layers->add(conv(c, in, out, 3));
  register_module("in_layers", in_layers);
  auto emb_layers = std::make_shared<nn::Sequential>();
  emb_layers->add(std::make_shared<nn::Activation>("silu"));
  emb_layers->add(std::make_shared<nn::Linear>(c.time_embed_dim, out, linear_options(c)));
  register_module("emb_layers", emb_layers);
  auto out_layers = std::make_shared<nn::Sequential>();
  out_layers->add(group_norm(c, out, kResnetNormEps));
  out_layers->add(std::make_shared<nn::Activation>("silu"));
  out_layers->add(std::make_shared<nn::Dropout>(0.0));
  out_layers->add(conv(c, out, out, 3));
  register_module("out_layers", out_layers);
  if (in != out) register_module("skip_connection", conv(c, in, out, 1));
}

Tensor ResBlock::run(const Tensor& x, const Tensor& silu_emb) {
  const auto& in_layers = *child("in_layers");
  const auto& out_layers = *child("out_layers");
  Tensor h = autograd::silu(apply_group_norm(*in_layers.child("0"), x, groups_, kResnetNormEps));
  h = in_layers.child("2")->forward(h);
  Tensor emb = child("emb_layers")->child("1")->forward(silu_emb);  // [B, out]
  h = autograd::add(h, autograd::reshape(emb, {emb.size(0), emb.size(1), 1, 1}));
  h = autograd::silu(apply_group_norm(*out_layers.child("0"), h, groups_, kResnetNormEps));
  h = out_layers.child("3")->forward(h);
  std::shared_ptr<Module> skip = child("skip_connection");
  return autograd::add(skip ? skip->forward(x) : x, h);
}

CrossAttention::CrossAttention(const UnetConfig& c, int64_t channels, int64_t context_dim)
    : heads_(c.heads(channels)) {
  register_module("to_q", std::make_shared<nn::Linear>(channels, channels, linear_options(c, false)));
  register_module("to_k", std::make_shared<nn::Linear>(context_dim, channels, linear_options(c, false)));
  register_module("to_v", std::make_shared<nn::Linear>(context_dim, channels, linear_options(c, false)));
  auto to_out = std::make_shared<nn::Sequential>();
  to_out->add(std::make_shared<nn::Linear>(channels, channels, linear_options(c)));
  register_module("to_out", to_out);
}

Tensor CrossAttention::run(const Tensor& x, const Tensor& context) {
  const Tensor& kv = context.defined() ? context : x;
  Tensor q = child("to_q")->forward(x), k = child("to_k")->forward(kv), v = child("to_v")->forward(kv);
  const int64_t batch = x.size(0), width = q.size(-1) / heads_;
  // [B, L, H, D] views read as [B, H, L, D] by the attention (no copy).
  auto heads = [&](const Tensor& t) {
    return autograd::transpose(autograd::reshape(t, {batch, t.size(1), heads_, width}), 1, 2);
  };
  Tensor out = autograd::scaled_dot_product_attention(heads(q), heads(k), heads(v));
  out = autograd::reshape(autograd::transpose(out, 1, 2), {batch, x.size(1), heads_ * width});
  return child("to_out")->child("0")->forward(out);
}

BasicTransformerBlock::BasicTransformerBlock(const UnetConfig& c, int64_t channels) {
  auto layer_norm = [&] {
    return std::make_shared<nn::LayerNorm>(Shape{channels}, kLayerNormEps, true, c.dtype, c.device);
  };
  register_module("attn1", std::make_shared<CrossAttention>(c, channels, channels));
  // ff.net = [GEGLU (its Linear "proj": C -> 2 x 4C), Dropout, Linear(4C, C)].
  auto geglu = std::make_shared<Holder>("GEGLU");
  geglu->add("proj", std::make_shared<nn::Linear>(channels, 8 * channels, linear_options(c)));
  auto net = std::make_shared<nn::Sequential>();
  net->add(geglu);
  net->add(std::make_shared<nn::Dropout>(0.0));
  net->add(std::make_shared<nn::Linear>(4 * channels, channels, linear_options(c)));
  auto ff = std::make_shared<Holder>("FeedForward");
  ff->add("net", net);
  register_module("ff", ff);
  register_module("attn2", std::make_shared<CrossAttention>(c, channels, c.context_dim));
  register_module("norm1", layer_norm());
  register_module("norm2", layer_norm());
  register_module("norm3", layer_norm());
}

Tensor BasicTransformerBlock::run(const Tensor& x, const Tensor& context) {
  auto* attn1 = static_cast<CrossAttention*>(child("attn1").get());
  auto* attn2 = static_cast<CrossAttention*>(child("attn2").get());
  Tensor h = autograd::add(attn1->run(child("norm1")->forward(x), Tensor()), x);
  h = autograd::add(attn2->run(child("norm2")->forward(h), context), h);
  const Module& net = *child("ff")->child("net");
  // GEGLU: the projection's first half is the value, the second the gate: value · GELU(gate) (erf form).
  Tensor projected = net.child("0")->child("proj")->forward(child("norm3")->forward(h));
  std::vector<Tensor> parts = autograd::chunk(projected, 2, -1);
  Tensor ff = net.child("2")->forward(autograd::mul(parts[0], autograd::gelu(parts[1])));
  return autograd::add(ff, h);
}

SpatialTransformer::SpatialTransformer(const UnetConfig& c, int64_t channels, int64_t depth)
    : groups_(c.norm_groups), depth_(depth), linear_(c.linear_projection) {
  register_module("norm", group_norm(c, channels, kTransformerNormEps));
  auto projection = [&]() -> std::shared_ptr<Module> {
    if (c.linear_projection) return std::make_shared<nn::Linear>(channels, channels, linear_options(c));
    return conv(c, channels, channels, 1);
  };
  register_module("proj_in", projection());
  auto blocks = std::make_shared<Holder>("ModuleList");
  for (int64_t k = 0; k < depth; ++k)
    blocks->add(std::to_string(k), std::make_shared<BasicTransformerBlock>(c, channels));
  register_module("transformer_blocks", blocks);
  register_module("proj_out", projection());
}

Tensor SpatialTransformer::run(const Tensor& x, const Tensor& context) {
  const int64_t batch = x.size(0), channels = x.size(1), height = x.size(2), width = x.size(3);
  Tensor h = apply_group_norm(*child("norm"), x, groups_, kTransformerNormEps);
  if (!linear_) h = child("proj_in")->forward(h);
  // [B, C, H, W] -> [B, H·W, C] (a copy: the tokens are rows).
  h = autograd::contiguous(autograd::transpose(autograd::reshape(h, {batch, h.size(1), height * width}), 1, 2));
  if (linear_) h = child("proj_in")->forward(h);
  for (const auto& [name, block] : child("transformer_blocks")->children())
    h = static_cast<BasicTransformerBlock*>(block.get())->run(h, context);
  if (linear_) h = child("proj_out")->forward(h);
  h = autograd::reshape(autograd::contiguous(autograd::transpose(h, 1, 2)), {batch, h.size(2), height, width});
  if (!linear_) h = child("proj_out")->forward(h);
  WICK_CHECK(h.size(1) == channels, "SDXL: a spatial transformer returned ", h.describe(), " for ", x.describe());
  return autograd::add(h, x);
}

Downsample::Downsample(const UnetConfig& c, int64_t channels) {
  register_module("op", conv(c, channels, channels, 3, 2));
}

Tensor Downsample::forward(const Tensor& x) { return child("op")->forward(x); }

Upsample::Upsample(const UnetConfig& c, int64_t channels) { register_module("conv", conv(c, channels, channels, 3)); }

Tensor Upsample::forward(const Tensor& x) { return child("conv")->forward(vae::upsample_nearest2x(x)); }

}  // namespace wick::sdxl
