// The Flux.1 (dev / schnell) rectified-flow transformer, with Black Forest Labs' parameter names,
// so the released checkpoints load as they are.
//
//   SafetensorsFile file = SafetensorsFile::open("flux1-dev.safetensors");
//   flux::FluxConfig c = flux::config_from_shapes(flux::tensor_shapes(file));   // dtype BF16
//   auto model = std::make_shared<flux::FluxTransformer>(c);
//   load_parameters(*model, file);                               // zero-copy, frozen
//   Tensor v = model->forward(latents, sigmas, t5, clip_pooled, guidance);   // [B, 16, H, W]
//   nn::apply_adapters(*model, {.patterns = {"double_blocks.*", "single_blocks.*"}});   // LoRA
//   model->set_gradient_checkpointing(true);                     // recompute each block in backward
//   model->set_block_swapper(swapper);                           // stream the last blocks' frozen weights
//
// Parameter names and shapes: models/flux/flux_config.h (parameter_shapes) and docs/models.md.
// Time and guidance: sigma in [0, 1] and the raw guidance value (e.g. 3.5); the model multiplies
// both by 1000 before the sinusoidal embedding, as BFL's time_factor.
#pragma once

#include <memory>
#include <vector>

#include "models/architecture.h"
#include "models/flux/flux_config.h"
#include "runtime/ops/rope.h"

namespace wick::flux {

// Packs 2x2 latent patches into tokens, as BFL: "b c (h 2) (w 2) -> b (h w) (c ph pw)".
// latents [B, C, H, W] (H, W even) -> [B, (H/2)(W/2), 4C], token r·(W/2) + c, features ordered
// (channel, row in patch, column in patch). Differentiable; a new contiguous tensor.
Tensor pack_latents(const Tensor& latents);
// The inverse of pack_latents: packed [B, (H/2)(W/2), 4C] -> [B, C, H, W] (height = H, width = W).
Tensor unpack_latents(const Tensor& packed, int64_t height, int64_t width);
// Position ids of an h x w token grid (h = H/2 rows, w = W/2 columns of packed tokens):
// [h·w, 3] f32 on the CPU, row r·w + c = (0, r, c). Text tokens get (0, 0, 0).
Tensor image_ids(int64_t h, int64_t w);

class FluxTransformer : public DiffusionModel {
 public:
  // Checks the config (flux_config.h validate) and builds randomly initialized layers (torch's
  // Linear init; RMSNorm scales at 1) in config.dtype on config.device.
  explicit FluxTransformer(FluxConfig config);
  std::string type_name() const override { return "FluxTransformer"; }

  // latents [B, C, H, W] unpacked, C = in_channels / 4, H and W even (any size); timesteps [B]
  // sigma in [0, 1]; context [B, L, context_dim] (T5; no mask: padding tokens are attended to, as
  // Flux); pooled [B, vec_dim] (CLIP); guidance [B] raw scale, required iff guidance_embed and
  // undefined otherwise. Returns the velocity [B, C, H, W] in the latents' dtype, which is also the
  // compute dtype (conditioning is cast to it once; f32 parameters with bf16 latents compute in
  // bf16). The time/guidance embeddings are computed in f32 from the given values.
  Tensor forward(const Tensor& latents, const Tensor& timesteps, const Tensor& context, const Tensor& pooled,
                 const Tensor& guidance = Tensor());

  const FluxConfig& config() const { return config_; }
  // Gradient checkpointing per block (double and single), engine/autograd/checkpoint.h: each block
  // keeps only its inputs and runs again in backward, handing its trainable parameters (LoRA
  // factors included) their gradients. Same gradients as without it (bitwise on the CPU).
  void set_gradient_checkpointing(bool on) override { config_.gradient_checkpointing = on; }

  // DiffusionModel: forward(x_t, time, cond.context, cond.pooled, guidance) with guidance =
  // cond.guidance, or default_guidance() for every sample when cond.guidance is undefined (dev;
  // schnell takes none). cond.context_mask is not used: Flux attends to T5's padding.
  Tensor predict(const Tensor& x_t, const Tensor& time, const diffusion::Conditioning& cond) override;
  std::string summary() const override;
  void check_latent_size(int64_t h, int64_t w) const override;
  DType dtype() const override { return config_.dtype; }
  std::string arch_name() const override { return "flux"; }
  // models/flux/flux_memory.h with this model's adapters and trainable parameters.
  ActivationProfile activation_profile(const ActivationShape& shape, bool checkpointing) const override;
  // The guidance value predict() feeds a dev model when the conditioning carries none (training:
  // model.guidance, 1.0 by default).
  void set_default_guidance(double value) { default_guidance_ = value; }
  // "double_blocks.0" ... "double_blocks.<depth-1>", "single_blocks.0" ... (execution order).
  std::vector<std::string> block_paths() const override;
  // The swapper's blocks must be some of block_paths (engine/block_swap.h); each runs between an
  // acquire and a release, in forward and in its checkpoint recomputation.
  void set_block_swapper(std::shared_ptr<BlockSwapper> swapper) override;
  const BlockSwapper* block_swapper() const override { return swapper_.get(); }
  double default_guidance() const { return default_guidance_; }

 private:
  // The RoPE cos/sin of the joint sequence [n_txt + grid_h·grid_w, 1, head_dim/2] f32 on `device`,
  // computed on the host; the last size's tables are kept (a training run repeats few sizes).
  const RopeTables& rope_tables(int64_t n_txt, int64_t grid_h, int64_t grid_w, Device device);

  struct RopeCache {
    int64_t n_txt = -1, grid_h = -1, grid_w = -1;
    Device device;
    RopeTables tables;
  };
  // The swapper index of block `position` in execution order, or -1 (not swapped).
  int swap_index(size_t position) const { return position < swap_index_.size() ? swap_index_[position] : -1; }

  FluxConfig config_;
  double default_guidance_ = 1.0;
  std::shared_ptr<BlockSwapper> swapper_;
  std::vector<int> swap_index_;
  RopeCache rope_cache_;
};

}  // namespace wick::flux
