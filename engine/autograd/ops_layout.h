// Differentiable layout changes (runtime/ops/layout.h with gradients). Each op is a permutation of
// elements, so its gradient is its inverse applied to the output gradient:
//
//   Tensor y = autograd::pixel_shuffle(x, 2);      // dx = pixel_unshuffle(dy, 2)
//   Tensor t = autograd::patchify(latents, 2);     // dlatents = unpatchify(dt, 2, H, W)
#pragma once

#include "runtime/tensor.h"

namespace wick::autograd {

// Same contracts as the runtime ops of the same names.
Tensor pixel_shuffle(const Tensor& x, int64_t r);
Tensor pixel_unshuffle(const Tensor& x, int64_t r);
Tensor patchify(const Tensor& x, int64_t p);
Tensor unpatchify(const Tensor& tokens, int64_t p, int64_t height, int64_t width);

}  // namespace wick::autograd
