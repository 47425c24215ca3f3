// The token layout of the Qwen-Image transformer (diffusers' QwenImagePipeline._pack_latents and
// QwenEmbedRope): latents packed into 2x2 patches with features in (c, ph, pw) order (Flux's), the
// multi-scale RoPE positions of the image tokens and of the text, and the joint key mask.
//
//   Tensor tokens = pack_latents(latents, 2);                    // [B, 16, H, W] -> [B, H/2 · W/2, 64]
//   std::vector<TokenGrid> grids = {{3, 5}, {4, 8}};             // the target's grid, then each reference's
//   Tensor img = image_positions(grids), txt = text_positions(grids, 9);   // F32 [N, 3], [9, 3]
//   Tensor mask = joint_key_mask(context_mask, n, device);       // U8 [B, 1, 1, L + N] or undefined
//
// Positions (frame, row, column), MODELS2 section 2.2 step 4 and trap 11: image i of the list has frame
// i; its rows run -(h - h/2) ... h/2 - 1 and its columns -(w - w/2) ... w/2 - 1 (centred, the extra
// index of an odd size on the negative side); text token k sits at M + k on all three axes, M the
// largest max(h/2, w/2) of all the images (integer halves).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/tensor.h"

namespace wick::qwenimage {

// A latent's grid of tokens: height and width in patches.
struct TokenGrid {
  int64_t height = 0;
  int64_t width = 0;
  int64_t tokens() const { return height * width; }
};

// latents [B, C, H, W] (H, W multiples of p) -> [B, (H/p)(W/p), C·p·p], differentiable.
Tensor pack_latents(const Tensor& latents, int64_t patch_size);
// The inverse: tokens [B, (H/p)(W/p), C·p·p] -> [B, C, H, W].
Tensor unpack_latents(const Tensor& tokens, int64_t patch_size, int64_t height, int64_t width);

// F32 [sum of grid tokens, 3] on the CPU: the images' (frame, row, column) positions, row-major per image.
Tensor image_positions(const std::vector<TokenGrid>& grids);
// F32 [text_length, 3] on the CPU: (M + k, M + k, M + k) for k < text_length.
Tensor text_positions(const std::vector<TokenGrid>& grids, int64_t text_length);

// context_mask [B, L] (nonzero = a text token, any pattern; any dtype, any device) -> U8
// [B, 1, 1, L + n_image] on `device`: the text mask, then ones for every image token. Undefined when
// context_mask is undefined or every entry is nonzero (every key attended, as diffusers' mask=None).
Tensor joint_key_mask(const Tensor& context_mask, int64_t n_image, Device device);

}  // namespace wick::qwenimage
