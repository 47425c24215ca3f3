// The FLUX.2 (dev, klein, klein-base) rectified-flow transformer, with Black Forest Labs' parameter
// names, so the released checkpoints load as they are; diffusers' folders load through
// flux2_weights.h.
//
//   WeightSource source = WeightSource::open("flux-2-klein-base-4b.safetensors");
//   auto model = flux2::load_transformer(source, {.dtype = DType::BF16}).model;   // flux2_weights.h
//   Tensor v = model->forward(latents, sigmas, context);                  // klein: no guidance
//   Tensor d = model->forward(latents, sigmas, context, guidance);        // dev: the raw scale, e.g. 4.0
//   Tensor e = model->forward(latents, sigmas, context, guidance, {reference});   // editing
//   nn::apply_adapters(*model, {.patterns = {"double_blocks.*", "single_blocks.*"}});   // LoRA
//   model->set_gradient_checkpointing(true);                              // recompute each block in backward
//
// Conventions (MODELS2 B2, traps 22-29): latents are the VAE's 2 x 2-patchified, normalized latents
// [B, in_channels, h, w] (128 channels, h = H / 16), one token per position, row-major. t is sigma in
// [0, 1] (1 = noise); the model multiplies it, and the guidance, by 1000 before the sinusoid. The output
// is the velocity eps - x0. RoPE has four axes (T, H, W, L) with theta 2000: text token l at (0, 0, 0, l),
// target position (r, c) at (0, r, c, 0), reference image i at (10 (i + 1), r, c, 0). The joint sequence
// is [text; target; references]; the text has no mask (padding tokens are attended to, as BFL's code and
// diffusers do).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "models/architecture.h"
#include "models/flux2/flux2_config.h"
#include "runtime/ops/rope.h"

namespace wick::flux2 {

// latents [B, C, h, w] -> tokens [B, h·w, C] (token r·w + c); differentiable, a new contiguous tensor.
Tensor pack_tokens(const Tensor& latents);
// The inverse: tokens [B, h·w, C] -> [B, C, h, w].
Tensor unpack_tokens(const Tensor& tokens, int64_t h, int64_t w);
// Position ids f32 on the CPU: an h x w grid at time offset t, [h·w, 4] with row r·w + c = (t, r, c, 0);
// text of n tokens, [n, 4] with row l = (0, 0, 0, l).
Tensor image_ids(int64_t h, int64_t w, int64_t t = 0);
Tensor text_ids(int64_t n);
// The time offset of reference image i (0-based): 10 (i + 1), as BFL's and diffusers' pipelines.
int64_t reference_time(int64_t index);

// Where a model's weights were read from (flux2_weights.h): what a full fine-tune is exported back as.
struct Flux2WeightOrigin {
  std::string layout;  // "bfl" or "diffusers"; "" = not loaded from a file
  std::string prefix;  // the names' prefix in the file ("model.diffusion_model.", ...)
  std::string path;    // the file or index opened
};

class Flux2Transformer : public DiffusionModel {
 public:
  // Checks the config (flux2_config.h validate) and builds randomly initialized layers (torch's Linear
  // init; RMSNorm scales at 1) in config.dtype on config.device.
  explicit Flux2Transformer(Flux2Config config);
  std::string type_name() const override { return "Flux2Transformer"; }

  // latents [B, in_channels, h, w]; timesteps [B] sigma; context [B, L, context_dim]; guidance [B] raw
  // scale, required iff guidance_embed and undefined otherwise; references [B, in_channels, h_i, w_i]
  // each (editing: their tokens follow the target's, their output is dropped). Returns the velocity
  // [B, in_channels, h, w] in the latents' dtype, which is also the compute dtype (context is cast to
  // it). The time/guidance sinusoids are computed in f32 from the given values.
  Tensor forward(const Tensor& latents, const Tensor& timesteps, const Tensor& context,
                 const Tensor& guidance = Tensor(), const std::vector<Tensor>& references = {});

  const Flux2Config& config() const { return config_; }
  const Flux2WeightOrigin& weight_origin() const { return origin_; }
  void set_weight_origin(Flux2WeightOrigin origin) { origin_ = std::move(origin); }
  // Gradient checkpointing per block (engine/autograd/checkpoint.h): each block keeps only its inputs and
  // runs again in backward. Same gradients as without it.
  void set_gradient_checkpointing(bool on) override { config_.gradient_checkpointing = on; }

  // DiffusionModel: forward(x_t, time, cond.context, guidance) with guidance = cond.guidance, or
  // default_guidance() for every sample when cond.guidance is undefined (dev; klein takes none).
  // cond.context_mask is not used: FLUX.2 attends to the text's padding.
  Tensor predict(const Tensor& x_t, const Tensor& time, const diffusion::Conditioning& cond) override;
  // "FLUX.2-dev (8 double + 48 single blocks, hidden 6144, bf16)"; klein-style models say "FLUX.2-klein".
  std::string summary() const override;
  void check_latent_size(int64_t h, int64_t w) const override;
  DType dtype() const override { return config_.dtype; }
  std::string arch_name() const override { return "flux2"; }
  // models/flux2/flux2_memory.h with this model's adapters and trainable parameters.
  ActivationProfile activation_profile(const ActivationShape& shape, bool checkpointing) const override;
  // The guidance value predict() feeds a dev model when the conditioning carries none (training:
  // model.guidance, 1.0 by default, as musubi-tuner and diffusion-pipe train dev).
  void set_default_guidance(double value) { default_guidance_ = value; }
  double default_guidance() const { return default_guidance_; }
  std::vector<std::string> block_paths() const override { return flux2::block_paths(config_); }
  void set_block_swapper(std::shared_ptr<BlockSwapper> swapper) override;
  const BlockSwapper* block_swapper() const override { return swapper_.get(); }

 private:
  // Checks forward's arguments (WickError naming the argument and the expected shape).
  void check_inputs(const Tensor& latents, const Tensor& timesteps, const Tensor& context, const Tensor& guidance,
                    const std::vector<Tensor>& references) const;
  // The RoPE cos/sin of [text; target; references], [L, 1, head_dim/2] f32 on `device`; the last
  // geometry's tables are kept (a training run repeats few sizes).
  const RopeTables& rope_tables(int64_t n_txt, const std::vector<std::pair<int64_t, int64_t>>& grids, Device device);
  int swap_index(size_t position) const { return position < swap_index_.size() ? swap_index_[position] : -1; }

  struct RopeCache {
    int64_t n_txt = -1;
    std::vector<std::pair<int64_t, int64_t>> grids;
    Device device;
    RopeTables tables;
  };

  Flux2Config config_;
  Flux2WeightOrigin origin_;
  double default_guidance_ = 1.0;
  std::shared_ptr<BlockSwapper> swapper_;
  std::vector<int> swap_index_;
  RopeCache rope_cache_;
};

}  // namespace wick::flux2
