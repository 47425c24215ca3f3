// Packs Fashion-MNIST into a cached-latent dataset (docs/dataset.md "The quickstart dataset"):
// pixels scaled to [-1, 1], 2x2 pixels packed into channels as Flux packs its latents
// (latent[c*4 + dy*2 + dx, i, j] = image[c, 2i + dy, 2j + dx]: [1, 28, 28] -> [4, 14, 14]),
// class names as captions, hashed word embeddings, labels.
//
//   PackSummary s = pack_fashion_mnist({.out = "data/fashion.h5", .split = "train", .limit = 200});
//   Tensor pixels = unpack_latents_2x2(latents);        // [N, 4, 14, 14] -> [N, 1, 28, 28], same values
#pragma once

#include <cstdint>
#include <string>

#include "runtime/tensor.h"

namespace wick {

struct PackOptions {
  std::string out;
  std::string split = "train";  // "train" or "test"
  int64_t limit = 0;            // 0 = all images
  bool force = false;           // replace an existing file
  bool progress = true;         // progress bar on stderr
};

struct PackSummary {
  int64_t n_samples = 0;
  double seconds = 0;
};

PackSummary pack_fashion_mnist(const PackOptions& options);

// images f32 [N, 784] in [0, 1] -> latents f32 [N, 4, 14, 14] in [-1, 1] (the packing above).
Tensor pack_images_2x2(const Tensor& images);
// The inverse layout: latents [N, 4c, h, w] (any float dtype, any device) -> f32 [N, c, 2h, 2w] on the
// CPU with image[k, 2i + dy, 2j + dx] = latent[k*4 + dy*2 + dx, i, j]; values are not rescaled.
Tensor unpack_latents_2x2(const Tensor& latents);

}  // namespace wick
