// The token sequences the Z-Image transformer attends over: 2x2 patches of each latent and its caption
// features, each padded to a multiple of 32 with a learned pad token, with their 3-axis position ids;
// and a batch of such sequences of different lengths, padded and masked, with per-sample RoPE tables.
//
//   SampleLayout l = sample_layout(64, 48, 11, 2);              // 32·24 image tokens, 11 -> 32 caption
//   Tensor tokens = patchify(latent, 2);                        // [C, H, W] -> [(H/2)(W/2), 4C]
//   Tensor ids = image_positions(l, 24);                        // [768, 3]: (33, row, column)
//   PaddedBatch b = pad_batch({{x0, x1}, {ids0, ids1}}, rope, head_dim, device);
//   Tensor y = attention(b.x, b.rope, b.mask);                   // x [B, L, dim], mask U8 [B, 1, 1, L]
//
// Positions (MODELS2 section 1.2): caption token i, pads included, (1 + i, 0, 0); image token (row h,
// column w) (padded caption length + 1, h, w); image pads (0, 0, 0). The RoPE angles are computed as
// the authors' RopeEmbedder: frequencies 1 / theta^(2j / d) per axis in f64, angle = position x
// frequency rounded to f32, then cos and sin of that f32 angle.
#pragma once

#include <cstdint>
#include <vector>

#include "models/zimage/zimage_config.h"
#include "runtime/ops/rope.h"
#include "runtime/tensor.h"

namespace wick::zimage {

// The token counts of one sample: a latent of height x width and a caption of caption_length tokens.
struct SampleLayout {
  int64_t n_image = 0;       // (height / p) (width / p) real image tokens
  int64_t image_padded = 0;  // n_image rounded up to a multiple of 32
  int64_t n_caption = 0;
  int64_t caption_padded = 0;  // n_caption rounded up to a multiple of 32
};
SampleLayout sample_layout(int64_t height, int64_t width, int64_t caption_length, int64_t patch_size);

// Position ids [image_padded, 3] and [caption_padded, 3] (f32, CPU) of a sample, as above.
Tensor image_positions(const SampleLayout& layout, int64_t grid_width);
Tensor caption_positions(const SampleLayout& layout);

// Channel-fastest patches: latent [C, H, W] (H, W multiples of p) -> [(H/p)(W/p), p·p·C], token
// r·(W/p) + c, features (row in patch, column in patch, channel). Differentiable.
Tensor patchify(const Tensor& latent, int64_t patch_size);
// The inverse: tokens [(H/p)(W/p), p·p·C] -> [C, H, W]. Differentiable.
Tensor unpatchify(const Tensor& tokens, int64_t patch_size, int64_t height, int64_t width);

// Sequences of a batch: tokens[b] [L_b, dim] and their position ids positions[b] [L_b, 3] (CPU).
struct TokenLists {
  std::vector<Tensor> tokens;
  std::vector<Tensor> positions;
};

struct PaddedBatch {
  Tensor x;                      // [B, L, dim], L = max L_b, zeros after each sequence (differentiable)
  RopeTables rope;               // cos, sin [B, L, 1, head_dim / 2] f32; angle 0 after each sequence
  Tensor mask;                   // U8 [B, 1, 1, L], 1 = a key to attend to; undefined when no sequence is padded
  std::vector<int64_t> lengths;  // L_b
};

// The batch of `lists` on `device`. WickError when a position is beyond its axis' axes_lens.
PaddedBatch pad_batch(const TokenLists& lists, const ZImageRope& rope, int64_t head_dim, Device device);

}  // namespace wick::zimage
