#include "models/dit/dit.h"

#include <cmath>

#include "engine/autograd/checkpoint.h"
#include "engine/autograd/ops_elementwise.h"
#include "engine/autograd/ops_join.h"
#include "engine/autograd/ops_layout.h"
#include "engine/autograd/ops_modulate.h"
#include "models/dit/dit_memory.h"
#include "models/nn/attention.h"
#include "models/nn/basic.h"
#include "models/nn/linear.h"
#include "models/nn/norm.h"
#include "models/nn/position_table.h"
#include "runtime/ops/copy.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/join.h"

namespace wick {
namespace {

// Sets every parameter of `module` to zero (adaLN-Zero and the zero final layer).
void zero_parameters(Module& module) {
  for (auto& [name, tensor] : module.named_parameters()) copy_into(tensor, zeros_like(tensor));
}

// x (1 + scale) + shift, with scale and shift [B, hidden] broadcast over the tokens.
Tensor modulate(const Tensor& x, const Tensor& shift, const Tensor& scale) { return autograd::modulate(x, shift, scale); }

// in -> linear_1 -> SiLU -> linear_2 (diffusers' TimestepEmbedding / PixArtAlphaTextProjection).
class EmbedMLP : public Module {
 public:
  EmbedMLP(int64_t in, int64_t hidden, nn::LinearOptions options) {
    register_module("linear_1", std::make_shared<nn::Linear>(in, hidden, options));
    register_module("linear_2", std::make_shared<nn::Linear>(hidden, hidden, options));
  }
  std::string type_name() const override { return "EmbedMLP"; }
  Tensor forward(const Tensor& x) override {
    return child("linear_2")->forward(autograd::silu(child("linear_1")->forward(x)));
  }
};

// Patchify, then Linear(C·p², hidden) per token (equal to DiT's stride-p conv).
class PatchEmbed : public Module {
 public:
  PatchEmbed(int64_t channels, int64_t patch, int64_t hidden, nn::LinearOptions options) : patch_(patch) {
    register_module("proj", std::make_shared<nn::Linear>(channels * patch * patch, hidden, options));
  }
  std::string type_name() const override { return "PatchEmbed"; }
  Tensor forward(const Tensor& x) override { return child("proj")->forward(autograd::patchify(x, patch_)); }

 private:
  int64_t patch_;
};

// A numbered list of child modules ("0", "1", ...) whose forwards the owner calls.
class ModuleList : public Module {
 public:
  std::string type_name() const override { return "ModuleList"; }
  void add(std::shared_ptr<Module> module) { register_module(std::to_string(children().size()), std::move(module)); }
};

// SiLU -> Linear(hidden, n·hidden): "adaLN_modulation.1" as in DiT; zero-initialized.
std::shared_ptr<nn::Sequential> make_modulation(int64_t hidden, int64_t n, nn::LinearOptions options) {
  auto seq = std::make_shared<nn::Sequential>();
  seq->add(std::make_shared<nn::Activation>("silu"));
  seq->add(std::make_shared<nn::Linear>(hidden, n * hidden, options));
  zero_parameters(*seq);
  return seq;
}

// One transformer block with adaLN-Zero: image tokens attend over [image tokens; text tokens].
class DiTBlock : public Module {
 public:
  DiTBlock(const DiTConfig& c, nn::LinearOptions options) {
    int64_t hidden = c.hidden_size;
    register_module("norm1", std::make_shared<nn::LayerNorm>(Shape{hidden}, 1e-6, false, c.dtype, c.device));
    nn::AttentionOptions attn;
    attn.context_dim = hidden;  // q from the image tokens, kv from [image; text]
    attn.linear = options;
    register_module("attn", std::make_shared<nn::MultiHeadAttention>(hidden, c.num_heads, attn));
    register_module("norm2", std::make_shared<nn::LayerNorm>(Shape{hidden}, 1e-6, false, c.dtype, c.device));
    int64_t mlp_hidden = static_cast<int64_t>(static_cast<double>(hidden) * c.mlp_ratio);
    register_module("mlp", std::make_shared<nn::MLP>(hidden, mlp_hidden, "gelu_tanh", options));
    register_module("adaLN_modulation", make_modulation(hidden, 6, options));
  }
  std::string type_name() const override { return "DiTBlock"; }

  // x [B, N, hidden], text [B, L, hidden], key_mask [B, 1, 1, N + L] U8, c [B, hidden].
  Tensor run(const Tensor& x, const Tensor& text, const Tensor& key_mask, const Tensor& c) {
    std::vector<Tensor> mod = autograd::chunk(child("adaLN_modulation")->forward(c), 6, 1);
    const Tensor &shift_msa = mod[0], &scale_msa = mod[1], &gate_msa = mod[2];
    const Tensor &shift_mlp = mod[3], &scale_mlp = mod[4], &gate_mlp = mod[5];
    Tensor h = modulate(child("norm1")->forward(x), shift_msa, scale_msa);
    auto* attn = static_cast<nn::MultiHeadAttention*>(child("attn").get());
    Tensor joint = autograd::concat({h, text}, 1);
    Tensor out = autograd::gated_residual(x, gate_msa, attn->attend(h, joint, key_mask));
    h = modulate(child("norm2")->forward(out), shift_mlp, scale_mlp);
    return autograd::gated_residual(out, gate_mlp, child("mlp")->forward(h));
  }
};

// norm_final -> modulate(shift, scale) -> linear(hidden, p²·C_out); linear and modulation zero.
class FinalLayer : public Module {
 public:
  FinalLayer(const DiTConfig& c, int64_t out_features, nn::LinearOptions options) {
    register_module("norm_final",
                    std::make_shared<nn::LayerNorm>(Shape{c.hidden_size}, 1e-6, false, c.dtype, c.device));
    auto linear = std::make_shared<nn::Linear>(c.hidden_size, out_features, options);
    zero_parameters(*linear);
    register_module("linear", linear);
    register_module("adaLN_modulation", make_modulation(c.hidden_size, 2, options));
  }
  std::string type_name() const override { return "FinalLayer"; }
  Tensor run(const Tensor& x, const Tensor& c) {
    std::vector<Tensor> mod = autograd::chunk(child("adaLN_modulation")->forward(c), 2, 1);
    return child("linear")->forward(modulate(child("norm_final")->forward(x), mod[0], mod[1]));
  }
};

}  // namespace

DiT::DiT(DiTConfig config) : config_(config) {
  const DiTConfig& c = config_;
  WICK_CHECK_KIND(Config, c.in_channels > 0 && c.patch_size > 0 && c.hidden_size > 0 && c.depth > 0,
                  "DiT: in_channels, patch_size, hidden_size and depth must be positive (got ", c.in_channels, ", ",
                  c.patch_size, ", ", c.hidden_size, ", ", c.depth, ")");
  WICK_CHECK_KIND(Config, c.input_size > 0 && c.input_size % c.patch_size == 0, "DiT: latent size ", c.input_size,
                  " is not divisible by patch_size ", c.patch_size);
  WICK_CHECK_KIND(Config, c.num_heads > 0 && c.hidden_size % c.num_heads == 0, "DiT: hidden_size ", c.hidden_size,
                  " is not divisible by num_heads ", c.num_heads);
  WICK_CHECK_KIND(Config, c.hidden_size % 4 == 0, "DiT: hidden_size ", c.hidden_size, " must be divisible by 4");
  WICK_CHECK_KIND(Config, c.text_dim > 0, "DiT: text_dim must be positive, got ", c.text_dim);
  WICK_CHECK_KIND(Config, c.mlp_ratio > 0, "DiT: mlp_ratio must be positive, got ", c.mlp_ratio);
  WICK_CHECK_KIND(Config, c.frequency_dim > 0 && c.frequency_dim % 2 == 0, "DiT: frequency_dim must be even");
  grid_ = c.input_size / c.patch_size;
  nn::LinearOptions options{.bias = true, .dtype = c.dtype, .device = c.device};

  register_module("x_embedder", std::make_shared<PatchEmbed>(c.in_channels, c.patch_size, c.hidden_size, options));
  std::vector<double> table = sincos_2d_table(c.hidden_size, grid_);
  register_parameter("pos_embed", &pos_embed_,
                     Tensor::from_vector<double>(table, {1, grid_ * grid_, c.hidden_size}).to(c.dtype).to(c.device));
  register_module("t_embedder", std::make_shared<EmbedMLP>(c.frequency_dim, c.hidden_size, options));
  if (c.pooled_dim > 0) register_module("y_embedder", std::make_shared<EmbedMLP>(c.pooled_dim, c.hidden_size, options));
  register_module("context_embedder", std::make_shared<nn::Linear>(c.text_dim, c.hidden_size, options));
  auto blocks = std::make_shared<ModuleList>();
  for (int64_t i = 0; i < c.depth; ++i) blocks->add(std::make_shared<DiTBlock>(c, options));
  register_module("blocks", blocks);
  register_module("final_layer",
                  std::make_shared<FinalLayer>(c, c.patch_size * c.patch_size * out_channels(), options));
}

// DiT / SD3 Timesteps(flip_sin_to_cos): [cos(t·1000·f_i), sin(t·1000·f_i)], f_i = 10000^(-i/half),
// computed in f32 (f64 for f64 models) and cast to `dtype`.
Tensor DiT::timestep_features(const Tensor& t, DType dtype) const {
  const int64_t half = config_.frequency_dim / 2;
  DType compute = dtype == DType::F64 ? DType::F64 : DType::F32;
  std::vector<double> freqs(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    freqs[i] = 1000.0 * std::exp(-std::log(10000.0) * static_cast<double>(i) / static_cast<double>(half));
  Tensor f = Tensor::from_vector<double>(freqs, {1, half}).to(compute).to(t.device());
  Tensor args = autograd::mul(autograd::unsqueeze(autograd::to_dtype(t, compute), 1), f);  // [B, half]
  Tensor features = autograd::concat({autograd::cos(args), autograd::sin(args)}, 1);
  return autograd::to_dtype(features, dtype);
}

Tensor DiT::predict(const Tensor& x_t, const Tensor& time, const diffusion::Conditioning& cond) {
  return forward(x_t, time, cond.context, cond.context_mask, cond.pooled);
}

std::string DiT::summary() const {
  return "DiT (hidden " + std::to_string(config_.hidden_size) + ", depth " + std::to_string(config_.depth) +
         ", heads " + std::to_string(config_.num_heads) + ", patch " + std::to_string(config_.patch_size) + ")";
}

ActivationProfile DiT::activation_profile(const ActivationShape& shape, bool checkpointing) const {
  return dit_activation_profile(config_, shape, checkpointing, layer_training_of(*this));
}

void DiT::check_latent_size(int64_t h, int64_t w) const {
  WICK_CHECK_KIND(Config, h == config_.input_size && w == config_.input_size, "latents of ", h, "x", w,
                  " do not fit the DiT, which takes ", config_.input_size, "x", config_.input_size,
                  " latents (its position table has one size)");
}

Tensor DiT::forward(const Tensor& x, const Tensor& t, const Tensor& context, const Tensor& context_mask,
                    const Tensor& pooled) {
  const DiTConfig& c = config_;
  WICK_CHECK(x.dim() == 4 && x.size(1) == c.in_channels && x.size(2) == c.input_size && x.size(3) == c.input_size,
             "DiT: input ", x.describe(), " is not [B, ", c.in_channels, ", ", c.input_size, ", ", c.input_size, "]");
  const int64_t batch = x.size(0);
  WICK_CHECK(t.dim() == 1 && t.size(0) == batch, "DiT: timesteps ", t.describe(), " are not [", batch, "]");
  WICK_CHECK(context.dim() == 3 && context.size(0) == batch && context.size(2) == c.text_dim, "DiT: context ",
             context.describe(), " is not [", batch, ", L, ", c.text_dim, "]");
  const int64_t n_text = context.size(1);
  if (context_mask.defined())
    WICK_CHECK(context_mask.dim() == 2 && context_mask.size(0) == batch && context_mask.size(1) == n_text,
               "DiT: context_mask ", context_mask.describe(), " is not [", batch, ", ", n_text, "]");
  if (c.pooled_dim > 0)
    WICK_CHECK(pooled.defined() && pooled.dim() == 2 && pooled.size(0) == batch && pooled.size(1) == c.pooled_dim,
               "DiT: pooled ", pooled.defined() ? pooled.describe() : std::string("(none)"), " is not [", batch,
               ", ", c.pooled_dim, "]");
  const DType dtype = x.dtype();

  Tensor tokens = autograd::add(child("x_embedder")->forward(x), autograd::to_dtype(pos_embed_, dtype));
  Tensor cond = child("t_embedder")->forward(timestep_features(t, dtype));
  if (c.pooled_dim > 0) cond = autograd::add(cond, child("y_embedder")->forward(autograd::to_dtype(pooled, dtype)));
  Tensor text = child("context_embedder")->forward(autograd::to_dtype(context, dtype));

  // Keys: every image token, then the text tokens the mask keeps. [B, 1, 1, N + L] U8.
  Tensor image_keep = ones({batch, n_tokens()}, DType::U8, x.device());
  Tensor text_keep = context_mask.defined() ? context_mask.to(DType::U8) : ones({batch, n_text}, DType::U8, x.device());
  Tensor key_mask = concat({image_keep, text_keep}, 1).reshape({batch, 1, 1, n_tokens() + n_text});

  for (const auto& [name, block] : child("blocks")->children()) {
    auto* b = static_cast<DiTBlock*>(block.get());
    if (!c.gradient_checkpointing) {
      tokens = b->run(tokens, text, key_mask, cond);
      continue;
    }
    // Only tokens, text and cond are kept; the block's trainable parameters (LoRA factors, or all
    // of it in full training) get their gradients from the recomputation.
    std::vector<Tensor> parameters;
    for (auto& [pname, p] : b->trainable_parameters()) parameters.push_back(p);
    tokens = autograd::checkpoint(
        [b, key_mask](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{b->run(in[0], in[1], key_mask, in[2])};
        },
        {tokens, text, cond}, parameters)[0];
  }
  Tensor out = static_cast<FinalLayer*>(child("final_layer").get())->run(tokens, cond);
  return autograd::unpatchify(out, c.patch_size, c.input_size, c.input_size);
}

}  // namespace wick
