// The Z-Image (Turbo, Base) single-stream transformer (S3-DiT), with the authors' module tree and
// parameter names (Tongyi-MAI/Z-Image src/zimage/transformer.py, which diffusers'
// ZImageTransformer2DModel keeps), so the released files load as they are.
//
//   WeightSource source = WeightSource::open("Z-Image-Turbo", "transformer");
//   auto model = zimage::load_transformer(source, DType::BF16);   // zimage_weights.h: any layout
//   std::vector<Tensor> out = model->forward({latent_a, latent_b}, t, {caption_a, caption_b});
//   nn::apply_adapters(*model, {.patterns = {"layers.*"}});     // LoRA on the main layers
//   model->set_gradient_checkpointing(true);                     // recompute each block in backward
//
// Sign conventions (MODELS2 section 1.2, traps 1-2), which forward() keeps as the network has them:
//   - t is the model's own time, 1 = clean image, 0 = pure noise: t = 1 - sigma for the flow-matching
//     sigma of x_sigma = (1 - sigma) x0 + sigma eps. The model multiplies it by t_scale (1000).
//   - the output is x0 - eps, the negative of the usual flow-matching velocity eps - x0
//     (diffusers' pipeline negates it before the Euler step).
// forward_batch() keeps them too; whoever drives the model as a flow-matching denoiser converts
// once: t = 1 - sigma in, velocity = -output out.
//
// Sequence layout (what attention sees): per sample, the image tokens (2x2 patches, features ordered
// (row in patch, column in patch, channel)) padded to a multiple of 32 with the learned x_pad_token,
// then the caption tokens padded to a multiple of 32 with cap_pad_token; those pad tokens are
// attended to. Positions (3 RoPE axes): caption token i (pads included) (1 + i, 0, 0); image token
// (row h, column w) (caption length padded + 1, h, w); image pads (0, 0, 0). Samples of one batch may
// differ in size and caption length: the shorter sequences are padded and masked as keys.
#pragma once

#include <memory>
#include <vector>

#include "engine/module.h"
#include "models/zimage/zimage_config.h"
#include "runtime/ops/rope.h"

namespace wick::zimage {

// The token layout of one sample (the numbers above), for a latent of height x width and a caption
// of caption_length tokens.
struct SampleLayout {
  int64_t n_image = 0;        // (height / p) (width / p) real image tokens
  int64_t image_padded = 0;   // n_image rounded up to a multiple of 32
  int64_t n_caption = 0;
  int64_t caption_padded = 0; // n_caption rounded up to a multiple of 32
};
SampleLayout sample_layout(int64_t height, int64_t width, int64_t caption_length, int64_t patch_size);

// Position ids [image_padded, 3] and [caption_padded, 3] (f32, CPU) of a sample, as above.
Tensor image_positions(const SampleLayout& layout, int64_t grid_width);
Tensor caption_positions(const SampleLayout& layout);

// Channel-fastest patches: latent [C, H, W] (H, W multiples of p) -> [(H/p)(W/p), p·p·C], token
// r·(W/p) + c, features (row in patch, column in patch, channel). Differentiable.
Tensor patchify(const Tensor& latent, int64_t patch_size);
// The inverse: tokens [(H/p)(W/p), p·p·C] -> [C, H, W].
Tensor unpatchify(const Tensor& tokens, int64_t patch_size, int64_t height, int64_t width);

class ZImageTransformer : public Module {
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
  // each row; undefined = all L tokens) -> [B, C, H, W].
  Tensor forward_batch(const Tensor& latents, const Tensor& t, const Tensor& context, const Tensor& context_mask);

  const ZImageConfig& config() const { return config_; }
  // Gradient checkpointing per block (engine/autograd/checkpoint.h): each block keeps only its
  // inputs and runs again in backward. Same gradients as without it.
  void set_gradient_checkpointing(bool on) { config_.gradient_checkpointing = on; }
  // "Z-Image (30 layers + 2 + 2 refiners, dim 3840, bf16)".
  std::string summary() const;
  // Config error when latents of h x w do not fit (not multiples of the patch size).
  void check_latent_size(int64_t h, int64_t w) const;
  DType dtype() const { return config_.dtype; }
  // zimage_config.h block_paths.
  std::vector<std::string> block_paths() const { return zimage::block_paths(config_); }

 private:
  // Runs the blocks of `list` ("noise_refiner", "context_refiner", "layers") over x.
  Tensor run_blocks(const char* list, Tensor x, const Tensor& adaln, const RopeTables& rope, const Tensor& mask);
  // cos/sin [B, length, 1, head_dim/2] f32 on `device` of per-sample position ids [L_b, 3] (L_b <=
  // length; later rows angle 0). WickError when a position is beyond the axis' axes_lens.
  RopeTables rope_tables(const std::vector<Tensor>& positions, int64_t length, Device device) const;

  ZImageConfig config_;
  Tensor x_pad_token_, cap_pad_token_;  // [1, dim]
};

}  // namespace wick::zimage
