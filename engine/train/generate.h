// Sampling images from a DiT: captions -> hashed text embeddings -> Euler (flow matching) or DDIM
// (ε-prediction) with classifier-free guidance -> latents -> pixels.
//
//   auto dataset = LatentDataset::open("data/fashion.h5");
//   HashedTextEncoder encoder = dataset_text_encoder(*dataset);          // L, D from the file
//   Tensor latents = generate_latents(*model, config, encoder, {"Bag", "Ankle boot"}, 20, 3.0, 7);
//   Tensor images = latents_to_images(latents, dataset->attributes());   // f32 [2, 1, 28, 28] in [0, 1]
//
// Image i of a call draws its starting noise from derive_stream(seed, i, 0, RngPurpose::Noise), so it
// is the same image whatever the number of captions after it or the batch it lands in.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/config/train_config.h"
#include "engine/data/hashed_text_encoder.h"
#include "engine/data/latent_dataset.h"
#include "models/diffusion/denoiser.h"
#include "models/dit/dit.h"

namespace wick {

// Images per model forward in generate_latents (the guided forward runs twice as many).
inline constexpr int64_t generate_batch_size = 64;

// The hashed word encoder with the settings of the dataset's embeddings (L = text_length(),
// D = text_dim()). A file whose `text_encoder` attribute names another encoder, or whose pooled
// width differs from D, throws WickError (Data): its captions cannot be re-encoded here.
HashedTextEncoder dataset_text_encoder(const LatentDataset& dataset);

// The DiT as a diffusion::Denoiser for `scheduler`, computing in `compute_dtype` and returning f32.
// FlowMatch: t is σ in [0, 1], passed as is. Ddpm: t is the timestep 0..999, passed as t / 1000 (the
// DiT embeds t·1000, so its embedder sees the timestep itself). Training and sampling use the same
// mapping. The model is held by reference: it must outlive the returned function.
diffusion::Denoiser dit_denoiser(DiT& model, NoiseScheduler scheduler, DType compute_dtype);

// The dtype the model computes in for `config`: bf16 / f16 under train.mixed_precision, else the
// DiT's parameter dtype.
DType generation_dtype(const DiT& model, const TrainConfig& config);

// Latents f32 [N, C, H, W] on the CPU for N captions (C = in_channels, H = W = input_size).
// Captions go through `encoder` ("[trigger]" replaced by config.trigger_word); an empty caption is
// the unconditional input. Guidance g != 1 mixes in the prediction for config.sample.negative_prompt
// (empty by default = unconditional). The sampler follows config.train.noise_scheduler: flowmatch ->
// Euler with the SD3 shift config.train.timestep_shift (none when 1), ddpm -> DDIM (scaled-linear
// schedule); config.sample.sampler must agree (auto or the matching one). Runs in evaluation mode
// without recording a graph, in batches of generate_batch_size, and restores the training flag.
// steps >= 1, guidance >= 0; encoder.dim() must equal the model's text_dim.
Tensor generate_latents(DiT& model, const TrainConfig& config, const HashedTextEncoder& encoder,
                        const std::vector<std::string>& captions, int64_t steps, double guidance, uint64_t seed);

// Latents [N, 4c, h, w] (any float dtype, any device) of a pixel-packed dataset (model_family
// "fashion-dit") -> images f32 [N, c, 2h, 2w] on the CPU in [0, 1]: latent / vae_scaling_factor +
// vae_shift_factor, unpacked 2x2 (unpack_latents_2x2), mapped from [-1, 1] to [0, 1] and clamped.
// Other families need a VAE decoder, which wick does not have: WickError (Config).
Tensor latents_to_images(const Tensor& latents, const LatentDatasetAttributes& data);

}  // namespace wick
