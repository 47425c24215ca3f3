// The small DiT of the quickstart: a diffusion transformer over patchified latents, conditioned on
// a timestep, text tokens and a pooled text vector, built from the parts SD3 and Flux use
// (adaLN-Zero modulation, joint attention over image and text tokens, learned 2-d position table).
//
//   DiTConfig cfg{.in_channels = 4, .input_size = 14, .text_dim = 64, .pooled_dim = 64};
//   auto dit = std::make_shared<DiT>(cfg);             // hidden 128, depth 4, 4 heads, patch 2
//   Tensor v = dit->forward(latents, sigmas, text, text_mask, pooled);   // [B, 4, 14, 14]
//   nn::apply_adapters(*dit, {.patterns = {"blocks.*.attn.*"}});          // LoRA on q, kv, proj
//   dit->set_gradient_checkpointing(true);                                // recompute blocks in backward
//
// Parameter names (docs/models.md): x_embedder.proj, pos_embed, t_embedder.linear_{1,2},
// y_embedder.linear_{1,2}, context_embedder, blocks.N.{attn.{q,kv,proj}, mlp.{fc1,fc2},
// adaLN_modulation.1}, final_layer.{linear, adaLN_modulation.1}. At construction the output is
// exactly zero (adaLN-Zero and a zero final layer), as in DiT and SD3.
#pragma once

#include <memory>

#include "models/architecture.h"

namespace wick {

struct DiTConfig {
  int64_t in_channels = 4;
  int64_t input_size = 14;       // latent height = width (fixes the position table's size)
  int64_t patch_size = 2;
  int64_t hidden_size = 128;
  int64_t depth = 4;
  int64_t num_heads = 4;
  double mlp_ratio = 4.0;
  int64_t text_dim = 64;         // width of the text tokens (context)
  int64_t pooled_dim = 64;       // width of the pooled text vector; 0 = no y_embedder
  bool learn_sigma = false;      // true: 2·in_channels outputs (DiT's learned variance)
  int64_t frequency_dim = 256;   // sinusoidal timestep features (DiT / SD3)
  bool gradient_checkpointing = false;  // keep only each block's inputs; recompute it in backward
  DType dtype = DType::F32;      // parameter dtype
  Device device = Device::cpu();
};

class DiT : public DiffusionModel {
 public:
  explicit DiT(DiTConfig config);
  std::string type_name() const override { return "DiT"; }

  // DiffusionModel: forward with cond.context / context_mask / pooled (guidance is ignored: the DiT
  // has no guidance input).
  Tensor predict(const Tensor& x_t, const Tensor& time, const diffusion::Conditioning& cond) override;
  std::string summary() const override;
  void check_latent_size(int64_t h, int64_t w) const override;
  DType dtype() const override { return config_.dtype; }
  std::string arch_name() const override { return "dit"; }
  // models/dit/dit_memory.h with this model's adapters and trainable parameters.
  ActivationProfile activation_profile(const ActivationShape& shape, bool checkpointing) const override;

  // x [B, C, H, W] (H = W = input_size); t [B] sigmas in [0, 1] (embedded as t·1000, as SD3);
  // context [B, L, text_dim]; context_mask [B, L] U8 (nonzero = real token; undefined = all
  // real); pooled [B, pooled_dim] (ignored when pooled_dim is 0). Returns [B, C_out, H, W] in
  // x's dtype. Conditioning tensors are cast to x's dtype.
  Tensor forward(const Tensor& x, const Tensor& t, const Tensor& context, const Tensor& context_mask,
                 const Tensor& pooled);

  const DiTConfig& config() const { return config_; }
  // Gradient checkpointing per block (engine/autograd/checkpoint.h): a block keeps only its inputs
  // during the forward and runs again in backward. Gradients are the same as without it (bitwise on
  // the CPU); activation memory falls from every block's intermediates to one block's.
  void set_gradient_checkpointing(bool on) override { config_.gradient_checkpointing = on; }
  int64_t n_tokens() const { return grid_ * grid_; }
  int64_t out_channels() const { return config_.learn_sigma ? 2 * config_.in_channels : config_.in_channels; }

  Tensor pos_embed_;  // [1, n_tokens, hidden], learned, initialized from 2-d sin-cos

 private:
  Tensor timestep_features(const Tensor& t, DType dtype) const;  // [B] -> [B, frequency_dim]
  DiTConfig config_;
  int64_t grid_;
};

}  // namespace wick
