// The Z-Image (Turbo, Base) single-stream transformer (S3-DiT), with the authors' module tree and
// parameter names (Tongyi-MAI/Z-Image src/zimage/transformer.py, which diffusers'
// ZImageTransformer2DModel keeps), so the released files load as they are.
//
//   WeightSource source = WeightSource::open("Z-Image-Turbo", "transformer");
//   auto model = zimage::load_transformer(source, {.dtype = DType::BF16}).model;   // zimage_weights.h
//   std::vector<Tensor> out = model->forward({latent_a, latent_b}, t, {caption_a, caption_b});
//   nn::apply_adapters(*model, {.patterns = {"layers.*"}});     // LoRA on the main layers
//   model->set_gradient_checkpointing(true);                     // recompute each block in backward
//   Tensor v = model->predict(x_sigma, sigma, cond);             // DiffusionModel: velocity eps - x0
//   model->set_block_swapper(swapper);                           // stream the last blocks' frozen weights
//
// Sign conventions (MODELS2 section 1.2, traps 1-2), which forward() keeps as the network has them:
//   - t is the model's own time, 1 = clean image, 0 = pure noise: t = 1 - sigma for the flow-matching
//     sigma of x_sigma = (1 - sigma) x0 + sigma eps. The model multiplies it by t_scale (1000).
//   - the output is x0 - eps, the negative of the usual flow-matching velocity eps - x0
//     (diffusers' pipeline negates it before the Euler step).
// forward_batch() keeps them too; predict() (the DiffusionModel interface the training step and the
// samplers drive) is the one place that converts: t = 1 - sigma in (computed (1000 - 1000 sigma) / 1000, as the
// pipelines do), velocity = -output out.
//
// Forward (MODELS2 section 1.2): c = t_embedder(t); per sample, the image tokens (2x2 patches,
// channel fastest, zimage_sequence.h) embedded and padded to a multiple of 32 with the learned
// x_pad_token run through the noise refiner (modulated by c); the caption features (RMSNorm + Linear)
// padded with cap_pad_token run through the context refiner (unmodulated); then [image tokens;
// caption tokens] through the main layers and the final layer, whose first tokens are unpatchified.
// The 32-padding tokens are attended to; samples of one batch may differ in size and caption length,
// the shorter sequences being padded and masked as keys.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "models/architecture.h"
#include "models/zimage/zimage_config.h"
#include "models/zimage/zimage_sequence.h"

namespace wick::zimage {

// Where a model's weights were read from (zimage_weights.h): what export_transformer writes a full fine-tune back as.
struct ZImageWeightOrigin {
  std::string layout;              // "diffusers" or "comfyui"; "" = not loaded from a file
  std::string prefix;              // the names' prefix in the file ("model.diffusion_model.", ...)
  std::string path;                // the file or index opened
};

class ZImageTransformer : public DiffusionModel {
 public:
  // Checks the config (zimage_config.h validate) and builds randomly initialized layers (torch's
  // Linear init, norm weights 1, pad tokens 0 as diffusers) in config.dtype on config.device.
  explicit ZImageTransformer(ZImageConfig config);
  std::string type_name() const override { return "ZImageTransformer"; }

  // latents: one [C, H, W] per sample (H, W multiples of the patch size; sizes may differ);
  // t F32 [B] (1 = clean, see above); captions: one [L_i, cap_feat_dim] per sample (L_i >= 1, no
  // padding rows). Returns one [C, H, W] per sample, x0 - eps, in the latents' dtype, which is also
  // the compute dtype (captions are cast to it; the timestep features are computed in f32).
  std::vector<Tensor> forward(const std::vector<Tensor>& latents, const Tensor& t, const std::vector<Tensor>& captions);
  // The same for a batch of one size: latents [B, C, H, W], context [B, L, cap_feat_dim] whose rows
  // beyond each sample's length are padding, context_mask [B, L] (1 = a caption token, a prefix of
  // each row; undefined = all L tokens; a row of zeros, a caption dropped by train.caption_dropout, is one zero
  // feature row) -> [B, C, H, W].
  Tensor forward_batch(const Tensor& latents, const Tensor& t, const Tensor& context, const Tensor& context_mask);

  const ZImageConfig& config() const { return config_; }
  const ZImageWeightOrigin& weight_origin() const { return origin_; }
  void set_weight_origin(ZImageWeightOrigin origin) { origin_ = std::move(origin); }
  // Gradient checkpointing per block (engine/autograd/checkpoint.h): each block keeps only its
  // inputs and runs again in backward. Same gradients as without it.
  void set_gradient_checkpointing(bool on) override { config_.gradient_checkpointing = on; }

  // DiffusionModel: x_sigma [B, C, H, W], sigma F32 [B] (flow matching, 0 = clean), cond.context
  // [B, L, cap_feat_dim] with cond.context_mask [B, L] (1 = caption token, a prefix of each row;
  // undefined = every row full) -> -forward_batch(x_sigma, 1 - sigma, ...), the velocity eps - x0.
  Tensor predict(const Tensor& x_sigma, const Tensor& sigma, const diffusion::Conditioning& cond) override;
  // "Z-Image (30 layers + 2 + 2 refiners, dim 3840, bf16)".
  std::string summary() const override;
  // Config error when latents of h x w do not fit (not multiples of the patch size).
  void check_latent_size(int64_t h, int64_t w) const override;
  DType dtype() const override { return config_.dtype; }
  std::string arch_name() const override { return "zimage"; }
  // models/zimage/zimage_memory.h with this model's adapters and trainable parameters.
  ActivationProfile activation_profile(const ActivationShape& shape, bool checkpointing) const override;
  // zimage_config.h block_paths: the refiners' blocks, then the main layers (execution order); block
  // swapping streams the last N, the main layers first.
  std::vector<std::string> block_paths() const override { return zimage::block_paths(config_); }
  // The swapper's blocks must be some of block_paths (engine/block_swap.h); each runs between an
  // acquire and a release, in forward and in its checkpoint recomputation.
  void set_block_swapper(std::shared_ptr<BlockSwapper> swapper) override;
  const BlockSwapper* block_swapper() const override { return swapper_.get(); }

 private:
  // Checks forward's arguments (WickError naming the sample and the expected shape).
  void check_inputs(const std::vector<Tensor>& latents, const Tensor& t, const std::vector<Tensor>& captions) const;
  // The embedded image tokens of one latent [C, H, W] (padded with x_pad_token) and its caption [L, cap_feat_dim]
  // (padded with cap_pad_token), in `dtype`, appended to `images` and `captions` with their positions.
  void embed_sample(const Tensor& latent, const Tensor& caption, DType dtype, TokenLists& images, TokenLists& captions);
  // Runs the blocks of `list` ("noise_refiner", "context_refiner", "layers") over the batch; `position`
  // is the first one's index in block_paths (for the swapper).
  Tensor run_blocks(const char* list, const PaddedBatch& batch, const Tensor& adaln, size_t position);
  // The swapper index of block `position` in block_paths, or -1 (not swapped).
  int swap_index(size_t position) const { return position < swap_index_.size() ? swap_index_[position] : -1; }

  ZImageConfig config_;
  ZImageWeightOrigin origin_;
  Tensor x_pad_token_, cap_pad_token_;  // [1, dim]
  std::shared_ptr<BlockSwapper> swapper_;
  std::vector<int> swap_index_;
};

}  // namespace wick::zimage
