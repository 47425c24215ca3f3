// The SDXL UNet with Stability AI's sgm parameter names (openaimodel.py's UNetModel, the LDM layout of
// sd_xl_base_1.0.safetensors under "model.diffusion_model."), so the released single file loads as it is.
//
//   WeightSource source = WeightSource::open("sd_xl_base_1.0.safetensors");
//   DetectedFormat format = sdxl::detect_weight_format(source);       // "ldm" (prefix stripped) or "diffusers"
//   sdxl::UnetConfig c = sdxl::config_from_shapes(mapped_shapes(source, format));
//   c.initialize = false;
//   auto unet = std::make_shared<sdxl::Unet>(c);
//   load_mapped(*unet, source, format);                                // zero-copy, frozen
//   Tensor eps = unet->forward(latents, timesteps, context, pooled, size_ids);   // [B, 4, H, W]
//   nn::apply_adapters(*unet, {.patterns = {"*.transformer_blocks.*", "*.proj_in", "*.proj_out"}});
//   unet->set_gradient_checkpointing(true);                            // recompute each input/middle/output block
//   unet->set_block_swapper(swapper);                     // stream the last blocks' frozen weights
//
// Layout (sgm): time_embed.{0,2}; label_emb.0.{0,2} (pooled + 6 size sinusoids -> time_embed_dim); input_blocks.0.0
// (conv_in), then per level num_res_blocks blocks [ResBlock, SpatialTransformer when the level has attention] and, but
// for the last level, a Downsample block (input_blocks.N.0.op); middle_block.{0: ResBlock, 1: SpatialTransformer,
// 2: ResBlock}; output_blocks per level from the last, num_res_blocks + 1 blocks [ResBlock on the concatenated skip,
// SpatialTransformer, Upsample in the level's last block but for level 0]; out.{0: GroupNorm, 2: Conv2d}. Names and
// shapes: models/sdxl/sdxl_config.h (parameter_shapes) and docs/models.md "SDXL".
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "models/architecture.h"
#include "models/sdxl/sdxl_config.h"

namespace wick::sdxl {

// The micro-conditioning of sample i as SDXL takes it: (original height, width, crop top, left, target height,
// width) in pixels, F32 [B, 6] on `device`; target = the latents' size x 8 (the VAE's factor).
Tensor size_conditioning(const std::vector<std::array<int64_t, 6>>& rows, Device device);
// Every sample at its own target size uncropped: (8h, 8w, 0, 0, 8h, 8w) for latents of h x w.
Tensor default_size_conditioning(int64_t batch, int64_t latent_height, int64_t latent_width, Device device);

// Where a UNet's weights were read from: the layout ("ldm" or "diffusers"), the name prefix the LDM tensors carried
// ("model.diffusion_model." in a full checkpoint) and the file or folder; empty when it was initialized.
struct WeightOrigin {
  std::string layout;
  std::string prefix;
  std::string path;
  std::vector<std::string> files;  // the safetensors files read
};

class Unet : public DiffusionModel {
 public:
  // Checks the config (sdxl_config.h validate) and builds randomly initialized layers (torch's Linear and Conv2d
  // init, norms at 1 / 0) in config.dtype on config.device; uninitialized when config.initialize is false.
  explicit Unet(UnetConfig config);
  std::string type_name() const override { return "Unet"; }

  // latents [B, in_channels, H, W] with H, W multiples of config.size_multiple(); timesteps [B] in the DDPM's units
  // (0..999, diffusers' and sgm's timestep, embedded in f32); context [B, L, context_dim]; with label_emb, pooled
  // [B, pooled_dim] and size_ids F32 [B, 6] (size_conditioning; undefined: default_size_conditioning), both ignored
  // without it. Returns [B, out_channels, H, W] in the latents' dtype, which is also the compute dtype (context and
  // pooled are cast to it once).
  Tensor forward(const Tensor& latents, const Tensor& timesteps, const Tensor& context, const Tensor& pooled,
                 const Tensor& size_ids);

  const UnetConfig& config() const { return config_; }
  // Gradient checkpointing per input, middle and output block (engine/autograd/checkpoint.h): each keeps only its
  // inputs and runs again in backward. Same gradients as without it (bitwise on the CPU).
  void set_gradient_checkpointing(bool on) override { config_.gradient_checkpointing = on; }

  // DiffusionModel: forward(x_t, timesteps, cond.context, cond.pooled, cond.size_ids) with timesteps = time · 1000,
  // rounded to the integer when within 1e-3 of one (DDPM timesteps are integers; t / 1000 in f32 does not always
  // multiply back exactly). cond.context_mask and cond.guidance are not used.
  Tensor predict(const Tensor& x_t, const Tensor& time, const diffusion::Conditioning& cond) override;
  std::string summary() const override;
  void check_latent_size(int64_t h, int64_t w) const override;
  DType dtype() const override { return config_.dtype; }
  std::string arch_name() const override { return "sdxl"; }
  // models/sdxl/sdxl_memory.h with this model's adapters and trainable parameters.
  ActivationProfile activation_profile(const ActivationShape& shape, bool checkpointing) const override;

  // "input_blocks.0" ... "middle_block", "output_blocks.0" ... (execution order; sdxl_config.h block_paths).
  std::vector<std::string> block_paths() const override;
  // The swapper's blocks must be some of block_paths (engine/block_swap.h); each runs between an acquire and a
  // release, in forward and in its checkpoint recomputation.
  void set_block_swapper(std::shared_ptr<BlockSwapper> swapper) override;
  const BlockSwapper* block_swapper() const override { return swapper_.get(); }

  const WeightOrigin& weight_origin() const { return origin_; }
  void set_weight_origin(WeightOrigin origin) { origin_ = std::move(origin); }

 private:
  // One input / middle / output block's children in order on h.
  Tensor run_block(Module& block, const Tensor& h, const Tensor& silu_emb, const Tensor& context);
  // run_block on h (joined with skip when it is defined), checkpointed when the config says so, between the
  // swapper's acquire and release of block `position` (execution order) when that block is swapped.
  Tensor run_checkpointed(Module& block, size_t position, const Tensor& h, const Tensor& skip, const Tensor& silu_emb,
                          const Tensor& context);

  UnetConfig config_;
  WeightOrigin origin_;
  std::shared_ptr<BlockSwapper> swapper_;
  std::vector<int> swap_index_;  // per block position: the swapper's index, or -1
};

}  // namespace wick::sdxl
