// What a sampler or objective needs from a model: a denoiser function and its conditioning.
//
//   Denoiser model = [&](const Tensor& x_t, const Tensor& t, const Conditioning& c) { return net(x_t, t, c); };
//   Conditioning cond{context, context_mask, pooled};   // undefined Tensors are allowed (guidance too)
//
// t is F32 [B]: σ in [0, 1] for rectified flow, the integer DDPM timestep (0..999, as a float)
// for ε-prediction. The model scales t for its own timestep embedder (SD3: σ·1000).
#pragma once

#include <functional>

#include "runtime/tensor.h"

namespace wick::diffusion {

// The text side of a denoiser's input; every field may be undefined (Tensor()). Batch axis 0.
struct Conditioning {
  Tensor context;       // [B, L, D] token embeddings (cross/joint attention)
  Tensor context_mask;  // [B, L] 1 = attend, 0 = padding
  Tensor pooled;        // [B, P] pooled text embedding (adaLN / vector conditioning)
  Tensor guidance;      // F32 [B] distilled-guidance input (Flux dev); undefined = the model's default
  // F32 [B, 6] SDXL's micro-conditioning: (original height, width, crop top, left, target height, width) in
  // pixels; undefined = each sample at its latents' size x 8, uncropped.
  Tensor size_ids;
};

using Denoiser = std::function<Tensor(const Tensor& x_t, const Tensor& t, const Conditioning& cond)>;

}  // namespace wick::diffusion
