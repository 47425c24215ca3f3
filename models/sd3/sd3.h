// The SD3 / SD3.5 (Medium, Large) MMDiT with Stability AI's parameter names (mmditx.py's MMDiTX), so
// the released single files load as they are.
//
//   WeightSource source = WeightSource::open("sd3.5_medium.safetensors");
//   DetectedFormat format = sd3::detect_weight_format(source);            // "model.diffusion_model." stripped
//   sd3::Sd3Config c = sd3::config_from_shapes(mapped_shapes(source, format));
//   c.initialize = false;
//   auto model = std::make_shared<sd3::MMDiT>(c);
//   load_mapped(*model, source, format);                                   // zero-copy, frozen
//   Tensor v = model->forward(latents, sigmas, context, pooled);           // [B, 16, H, W]
//   nn::apply_adapters(*model, {.patterns = {"joint_blocks.*"}});          // LoRA on every block Linear
//   model->set_gradient_checkpointing(true);                               // recompute each joint block
//   model->set_block_swapper(swapper);                 // stream the last joint blocks' frozen weights
//
// Parameter names and shapes: models/sd3/sd3_config.h (parameter_shapes) and docs/models.md.
// Time: σ in [0, 1]; the model embeds σ · 1000 (SAI's ModelSamplingDiscreteFlow.timestep, diffusers'
// scheduler timesteps), computed in f32.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "models/architecture.h"
#include "models/sd3/sd3_config.h"

namespace wick::sd3 {

// The centre h x w window of an s x s position table: top = (s - h) / 2, left = (s - w) / 2 (integer
// division), as SAI's cropped_pos_embed. table [1, s², hidden] -> [1, h·w, hidden], row-major over the
// window. Differentiable; Config error (naming the sizes) when h or w exceeds s.
Tensor crop_position_table(const Tensor& table, int64_t table_size, int64_t h, int64_t w);

// The inverse of the final layer's token layout: tokens [B, h·w, p·p·C] with features ordered
// (row in patch, column in patch, channel) -> [B, C, h·p, w·p] (SAI's "nhwpqc -> nchpwq"). Differentiable.
Tensor unpatchify(const Tensor& tokens, int64_t patch, int64_t h, int64_t w);

class MMDiT : public DiffusionModel {
 public:
  // Checks the config (sd3_config.h validate) and builds randomly initialized layers (torch's Linear
  // init, RMSNorm scales at 1, pos_embed the 2-d sin-cos table of the whole grid) in config.dtype on
  // config.device; uninitialized when config.initialize is false (weights are loaded next).
  explicit MMDiT(Sd3Config config);
  std::string type_name() const override { return "MMDiT"; }

  // latents [B, in_channels, H, W] with H, W multiples of patch_size and H/p, W/p at most
  // pos_embed_max_size; timesteps [B] σ in [0, 1]; context [B, L, context_dim] (no mask: SD3 attends
  // to the padding); pooled [B, pooled_dim]. Returns the velocity [B, out_channels, H, W] in the
  // latents' dtype, which is also the compute dtype (conditioning is cast to it once; f32 parameters
  // with bf16 latents compute in bf16); the timestep features are computed in f32.
  Tensor forward(const Tensor& latents, const Tensor& timesteps, const Tensor& context, const Tensor& pooled);

  const Sd3Config& config() const { return config_; }
  // Gradient checkpointing per joint block (engine/autograd/checkpoint.h): each block keeps only its
  // inputs and runs again in backward. Same gradients as without it (bitwise on the CPU).
  void set_gradient_checkpointing(bool on) override { config_.gradient_checkpointing = on; }

  // DiffusionModel: forward(x_t, time, cond.context, cond.pooled); cond.context_mask and cond.guidance
  // are not used.
  Tensor predict(const Tensor& x_t, const Tensor& time, const diffusion::Conditioning& cond) override;
  std::string summary() const override;
  void check_latent_size(int64_t h, int64_t w) const override;
  DType dtype() const override { return config_.dtype; }
  std::string arch_name() const override { return "sd3"; }
  // models/sd3/sd3_memory.h with this model's adapters and trainable parameters.
  ActivationProfile activation_profile(const ActivationShape& shape, bool checkpointing) const override;
  // "joint_blocks.0" ... "joint_blocks.<depth-1>" (execution order).
  std::vector<std::string> block_paths() const override;
  // The swapper's blocks must be some of block_paths (engine/block_swap.h); each runs between an
  // acquire and a release, in forward and in its checkpoint recomputation.
  void set_block_swapper(std::shared_ptr<BlockSwapper> swapper) override;
  const BlockSwapper* block_swapper() const override { return swapper_.get(); }

 private:
  // x_embedder: the stride-p convolution, applied as patchify + a Linear on its weight [H, C·p·p]
  // (the same products), + the cropped position table.
  Tensor embed_patches(const Tensor& latents);

  // The swapper index of joint block `position`, or -1 (not swapped).
  int swap_index(size_t position) const { return position < swap_index_.size() ? swap_index_[position] : -1; }

  Sd3Config config_;
  Tensor pos_embed_;
  std::shared_ptr<BlockSwapper> swapper_;
  std::vector<int> swap_index_;
};

}  // namespace wick::sd3
