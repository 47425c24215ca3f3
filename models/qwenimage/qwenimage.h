// The Qwen-Image transformer (QwenImageTransformer2DModel of diffusers 0.42.1: 60 dual-stream MMDiT
// blocks, dim 3072) with diffusers' module tree and parameter names, which the released files and
// ComfyUI's single files use, so they load as they are. Also Qwen-Image-Edit (reference images'
// tokens after the target's) and Edit-2511 (zero_cond_t).
//
//   WeightSource source = WeightSource::open("Qwen-Image", "transformer");
//   auto model = qwenimage::load_transformer(source, {.dtype = DType::BF16}).model;   // qwenimage_weights.h
//   Tensor v = model->forward(latents, sigma, context, context_mask);      // velocity eps - x0
//   Tensor e = model->forward(latents, sigma, context, mask, {reference});  // Edit: references' latents
//   nn::apply_adapters(*model, {.patterns = {"transformer_blocks.*"}});    // LoRA on the blocks
//   model->set_gradient_checkpointing(true);                               // recompute each block in backward
//   Tensor p = model->predict(x_sigma, sigma, cond);                       // DiffusionModel: the same velocity
//
// Conventions (MODELS2 section 2.2, traps 11-14): t is the flow-matching sigma (1 = pure noise), as
// diffusers' pipelines feed it (scheduler timestep / 1000); the model multiplies it by 1000 inside
// its sinusoid ([cos, sin], diffusers' rounding order, computed in f32). The output is the velocity
// eps - x0 (no negation). The text is RMS-normed (txt_norm) before txt_in; the joint sequence is
// [text; image]; padded text tokens are masked as keys only (their own rows are computed and unused).
// All samples of a batch share the image geometry (diffusers uses the first sample's for all).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "models/architecture.h"
#include "models/qwenimage/qwenimage_config.h"
#include "models/qwenimage/qwenimage_sequence.h"

namespace wick::qwenimage {

// Where a model's weights were read from (qwenimage_weights.h): what export_transformer writes a full fine-tune back as.
struct QwenImageWeightOrigin {
  std::string layout;  // "diffusers" or "comfyui"; "" = not loaded from a file
  std::string prefix;  // the names' prefix in the file ("model.diffusion_model.", ...)
  std::string path;    // the file or index opened
};

class QwenImageTransformer : public DiffusionModel {
 public:
  // Checks the config (qwenimage_config.h validate) and builds randomly initialized layers (torch's
  // Linear init, norm weights 1) in config.dtype on config.device.
  explicit QwenImageTransformer(QwenImageConfig config);
  std::string type_name() const override { return "QwenImageTransformer2DModel"; }

  // diffusers' forward: tokens [B, N, in_channels] = the packed target latents then each reference's
  // (pack_latents), grids their token grids in that order (sum of tokens = N); t [B] (sigma);
  // context [B, L, text_dim]; context_mask [B, L] (nonzero = text token, any pattern; undefined =
  // every token) -> [B, N, patch_features] for every image token, in the tokens' dtype, which is the
  // compute dtype (context is cast to it).
  Tensor forward_packed(const Tensor& tokens, const std::vector<TokenGrid>& grids, const Tensor& t,
                        const Tensor& context, const Tensor& context_mask);
  // latents [B, out_channels, H, W] (H, W multiples of the patch size), references: Edit's reference
  // latents [B, out_channels, h_i, w_i] each, in order (frame 1, 2, ...) -> the target's prediction
  // [B, out_channels, H, W].
  Tensor forward(const Tensor& latents, const Tensor& t, const Tensor& context, const Tensor& context_mask,
                 const std::vector<Tensor>& references = {});

  const QwenImageConfig& config() const { return config_; }
  const QwenImageWeightOrigin& weight_origin() const { return origin_; }
  void set_weight_origin(QwenImageWeightOrigin origin) { origin_ = std::move(origin); }
  // Gradient checkpointing per block (engine/autograd/checkpoint.h): each block keeps only its inputs
  // and runs again in backward. Same gradients as without it.
  void set_gradient_checkpointing(bool on) override { config_.gradient_checkpointing = on; }

  // DiffusionModel: x_sigma [B, C, H, W], sigma F32 [B] (flow matching, 0 = clean), cond.context
  // [B, L, text_dim] with cond.context_mask [B, L] (1 = text token; undefined = every token) ->
  // forward(x_sigma, (1000 sigma) / 1000, ...), the velocity eps - x0: the timestep diffusers'
  // pipelines and its LoRA trainer feed (the scheduler's timestep, sigma x 1000 in f32, over 1000).
  Tensor predict(const Tensor& x_sigma, const Tensor& sigma, const diffusion::Conditioning& cond) override;
  // "Qwen-Image (60 blocks, dim 3072, bf16)".
  std::string summary() const override;
  // Config error when latents of h x w do not fit (not multiples of the patch size).
  void check_latent_size(int64_t h, int64_t w) const override;
  DType dtype() const override { return config_.dtype; }
  std::string arch_name() const override { return "qwenimage"; }
  // models/qwenimage/qwenimage_memory.h with this model's adapters and trainable parameters.
  ActivationProfile activation_profile(const ActivationShape& shape, bool checkpointing) const override;
  // qwenimage_config.h block_paths: the transformer blocks in execution order.
  std::vector<std::string> block_paths() const override { return qwenimage::block_paths(config_); }
  // Streams the frozen weights of some of block_paths around each block's run (engine/block_swap.h), in
  // forward and in its checkpoint's recomputation.
  void set_block_swapper(std::shared_ptr<BlockSwapper> swapper) override;
  const BlockSwapper* block_swapper() const override { return swapper_.get(); }

 private:
  // Checks forward_packed's arguments (WickError naming the argument and the expected shape).
  void check_inputs(const Tensor& tokens, const std::vector<TokenGrid>& grids, const Tensor& t, const Tensor& context,
                    const Tensor& context_mask) const;
  // The timestep embedding [B, dim] of t in `dtype`.
  Tensor embed_time(const Tensor& t, DType dtype);

  QwenImageConfig config_;
  QwenImageWeightOrigin origin_;
  std::shared_ptr<BlockSwapper> swapper_;
  std::vector<int> swap_index_;
};

}  // namespace wick::qwenimage
