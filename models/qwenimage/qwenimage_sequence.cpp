#include "models/qwenimage/qwenimage_sequence.h"

#include <algorithm>

#include "engine/autograd/ops_layout.h"
#include "runtime/error.h"

namespace wick::qwenimage {

Tensor pack_latents(const Tensor& latents, int64_t p) {
  WICK_CHECK(latents.defined() && latents.dim() == 4 && latents.size(2) % p == 0 && latents.size(3) % p == 0,
             "Qwen-Image: latents ", latents.defined() ? latents.describe() : std::string("(none)"),
             " are not [B, C, H, W] with H and W multiples of ", p);
  const int64_t b = latents.size(0), c = latents.size(1), h = latents.size(2) / p, w = latents.size(3) / p;
  Tensor x = autograd::reshape(latents, {b, c, h, p, w, p});
  x = autograd::permute(x, {0, 2, 4, 1, 3, 5});  // [B, h, w, C, ph, pw]
  return autograd::reshape(x, {b, h * w, c * p * p});
}

Tensor unpack_latents(const Tensor& tokens, int64_t p, int64_t height, int64_t width) {
  const int64_t h = height / p, w = width / p;
  WICK_CHECK(tokens.dim() == 3 && height % p == 0 && width % p == 0 && tokens.size(1) == h * w &&
                 tokens.size(2) % (p * p) == 0,
             "Qwen-Image: tokens ", tokens.describe(), " are not [B, ", h * w, ", C x ", p, " x ", p, "] for ", height,
             " x ", width, " latents");
  const int64_t b = tokens.size(0), c = tokens.size(2) / (p * p);
  Tensor x = autograd::reshape(tokens, {b, h, w, c, p, p});
  x = autograd::permute(x, {0, 3, 1, 4, 2, 5});  // [B, C, h, ph, w, pw]
  return autograd::reshape(x, {b, c, height, width});
}

Tensor image_positions(const std::vector<TokenGrid>& grids) {
  std::vector<float> ids;
  for (size_t frame = 0; frame < grids.size(); ++frame) {
    const TokenGrid& g = grids[frame];
    WICK_CHECK(g.height > 0 && g.width > 0, "Qwen-Image: image ", frame, " has an empty token grid ", g.height, " x ",
               g.width);
    for (int64_t r = 0; r < g.height; ++r)
      for (int64_t c = 0; c < g.width; ++c) {
        ids.push_back(static_cast<float>(frame));
        ids.push_back(static_cast<float>(r - (g.height - g.height / 2)));
        ids.push_back(static_cast<float>(c - (g.width - g.width / 2)));
      }
  }
  return Tensor::from_vector<float>(ids, {static_cast<int64_t>(ids.size() / 3), 3});
}

Tensor text_positions(const std::vector<TokenGrid>& grids, int64_t text_length) {
  int64_t start = 0;
  for (const TokenGrid& g : grids) start = std::max({start, g.height / 2, g.width / 2});
  std::vector<float> ids;
  for (int64_t k = 0; k < text_length; ++k) ids.insert(ids.end(), 3, static_cast<float>(start + k));
  return Tensor::from_vector<float>(ids, {text_length, 3});
}

Tensor joint_key_mask(const Tensor& context_mask, int64_t n_image, Device device) {
  if (!context_mask.defined()) return Tensor();
  WICK_CHECK(context_mask.dim() == 2, "Qwen-Image: context_mask ", context_mask.describe(), " is not [B, L]");
  const int64_t batch = context_mask.size(0), length = context_mask.size(1);
  const std::vector<float> text = context_mask.to(DType::F32).to(Device::cpu()).contiguous().to_vector<float>();
  if (std::all_of(text.begin(), text.end(), [](float v) { return v != 0.0f; })) return Tensor();
  std::vector<uint8_t> keep;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t k = 0; k < length; ++k) keep.push_back(text[static_cast<size_t>(b * length + k)] != 0.0f ? 1 : 0);
    keep.insert(keep.end(), static_cast<size_t>(n_image), uint8_t{1});
  }
  return Tensor::from_vector<uint8_t>(keep, {batch, 1, 1, length + n_image}, device);
}

}  // namespace wick::qwenimage
