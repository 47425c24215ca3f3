// Layout changes between channels, space and tokens (torch / Flux semantics). Each is a permute
// plus a reshape; the result is a new contiguous tensor.
//
//   Tensor y = pixel_shuffle(x, 2);          // [N, C*4, H, W] -> [N, C, 2H, 2W]
//   Tensor x2 = pixel_unshuffle(y, 2);       // back to [N, C*4, H, W]
//   Tensor tokens = patchify(latents, 2);    // [B, C, H, W] -> [B, (H/2)*(W/2), C*4]
//   Tensor latents2 = unpatchify(tokens, 2, H, W);
#pragma once

#include "runtime/tensor.h"

namespace wick {

// x [*, C*r*r, H, W] -> [*, C, H*r, W*r]: out[c, h*r + i, w*r + j] = x[c*r*r + i*r + j, h, w].
Tensor pixel_shuffle(const Tensor& x, int64_t r);
// x [*, C, H*r, W*r] -> [*, C*r*r, H, W], the inverse of pixel_shuffle.
Tensor pixel_unshuffle(const Tensor& x, int64_t r);
// x [B, C, H, W] with H, W divisible by p -> [B, (H/p)*(W/p), C*p*p] in the order
// "b c (h ph) (w pw) -> b (h w) (c ph pw)" (Flux).
Tensor patchify(const Tensor& x, int64_t p);
// tokens [B, (H/p)*(W/p), C*p*p] -> [B, C, H, W], the inverse of patchify.
Tensor unpatchify(const Tensor& tokens, int64_t p, int64_t height, int64_t width);

}  // namespace wick
