// A cached-latent dataset a LoRA can learn from, for the real-model training tests (tests/train/arch_fixture.cpp's
// rows): three captions, each with its own deterministic text embeddings and its own latent pattern
// (cosine stripes whose frequency and direction depend on the caption and the channel), plus a little per-sample
// noise (Philox), in any number of buckets.
//
//   write_caption_dataset(dir + "/flux.h5", {.model_family = "flux", .vae_scaling = 0.3611, .vae_shift = 0.1159,
//                                            .channels = 16, .text_length = 16, .text_dim = 4096, .pooled_dim = 768,
//                                            .buckets = {{16, 24}, {24, 16}}, .per_bucket = 6});
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/data/latent_dataset.h"
#include "runtime/philox.h"

namespace wick::testing {

struct CaptionDatasetOptions {
  std::string model_family;
  double vae_scaling = 1.0, vae_shift = 0.0;  // the model sees (latent - shift) * scaling
  // Per-channel normalization (Qwen-Image's VAE): the model sees (latent - mean[c]) / std[c]; both empty, or both
  // `channels` long (recorded as vae_latents_mean / vae_latents_std)
  std::vector<double> latents_mean, latents_std;
  int64_t channels = 16, text_length = 16, text_dim = 64, pooled_dim = 64;
  std::vector<std::pair<int64_t, int64_t>> buckets;  // latent (H, W)
  int64_t per_bucket = 4;
  bool logvar = false;         // store the latents as a VAE distribution: mean (the pattern) and latents_logvar
                               // about -4 (a std of about 0.05 in the model's units at Flux's scaling)
  bool t5_attributes = false;  // record text_embeds_encoder t5-xxl, text_pooled_encoder clip-l, length L
  bool sizes = false;          // record SDXL's original_size (2 to 3 x the pixel size) and crop per sample
};

inline const std::vector<std::string>& caption_dataset_captions() {
  static const std::vector<std::string> captions = {"wide red stripes", "narrow blue stripes", "fine green checks"};
  return captions;
}

// Caption k's text: its first 3 + k tokens real (mask 1), N(0, 1)/2 entries; the rest padding (zero).
inline void caption_text(int64_t k, const CaptionDatasetOptions& s, float* embeds, uint8_t* mask, float* pooled) {
  RngStream text = derive_stream(7, static_cast<uint64_t>(k), 1, RngPurpose::Test);
  const int64_t real = std::min<int64_t>(3 + k, s.text_length);
  for (int64_t t = 0; t < s.text_length; ++t) {
    mask[t] = t < real ? 1 : 0;
    for (int64_t d = 0; d < s.text_dim; ++d)
      embeds[t * s.text_dim + d] =
          t < real ? 0.5f * stream_normal(text, static_cast<uint64_t>(t * s.text_dim + d)) : 0.0f;
  }
  RngStream pool = derive_stream(7, static_cast<uint64_t>(k), 2, RngPurpose::Test);
  for (int64_t p = 0; p < s.pooled_dim; ++p) pooled[p] = 0.5f * stream_normal(pool, static_cast<uint64_t>(p));
}

inline void write_caption_dataset(const std::string& path, const CaptionDatasetOptions& s) {
  LatentDatasetAttributes attributes{.model_family = s.model_family, .latent_channels = s.channels,
                                     .vae_scaling_factor = s.vae_scaling, .vae_shift_factor = s.vae_shift,
                                     .vae_latents_mean = s.latents_mean, .vae_latents_std = s.latents_std,
                                     .text_encoder = "wick-test-random"};
  if (s.t5_attributes) {
    attributes.text_embeds_encoder = "t5-xxl";
    attributes.text_pooled_encoder = "clip-l";
    attributes.text_max_length = s.text_length;
  }
  LatentDatasetWriter writer(path, attributes);
  const std::vector<std::string>& names = caption_dataset_captions();
  int64_t sample = 0;
  for (const auto& [h, w] : s.buckets) {
    const int64_t n = s.per_bucket, c = s.channels;
    std::vector<float> latents(static_cast<size_t>(n * c * h * w)), logvar(s.logvar ? latents.size() : 0);
    std::vector<float> embeds(static_cast<size_t>(n * s.text_length * s.text_dim));
    std::vector<float> pooled(static_cast<size_t>(n * s.pooled_dim));
    std::vector<uint8_t> mask(static_cast<size_t>(n * s.text_length));
    std::vector<std::string> captions;
    std::vector<int64_t> original_size, crop;
    for (int64_t i = 0; i < n; ++i, ++sample) {
      const int64_t factor = 2 + sample % 2;  // source images 2 or 3 times the bucket's 8h x 8w pixels
      original_size.insert(original_size.end(), {8 * h * factor, 8 * w * factor});
      crop.insert(crop.end(), {(sample % 3) * 8, (sample % 4) * 4});
      const int64_t k = sample % static_cast<int64_t>(names.size());
      captions.push_back(names[static_cast<size_t>(k)]);
      caption_text(k, s, &embeds[static_cast<size_t>(i * s.text_length * s.text_dim)],
                   &mask[static_cast<size_t>(i * s.text_length)], pooled.data() + i * s.pooled_dim);
      RngStream noise = derive_stream(7, static_cast<uint64_t>(sample), 0, RngPurpose::Test);
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t y = 0; y < h; ++y)
          for (int64_t x = 0; x < w; ++x) {
            const int64_t e = ((i * c + ch) * h + y) * w + x;
            const int64_t along = (ch + k) % 2 == 0 ? x : (k == 2 ? x + y : y);
            const double phase =
                3.14159265358979 * static_cast<double>((k + 1) * along) / 4.0 + 0.4 * static_cast<double>(ch);
            const double model_value = 0.9 * std::cos(phase) + 0.1 * stream_normal(noise, static_cast<uint64_t>(e));
            // Stored as the VAE writes it: the model sees (latent - shift) * scaling = model_value, or
            // (latent - mean[c]) / std[c] = model_value.
            const auto channel = static_cast<size_t>(ch);
            latents[static_cast<size_t>(e)] =
                s.latents_mean.empty()
                    ? static_cast<float>(model_value / s.vae_scaling + s.vae_shift)
                    : static_cast<float>(model_value * s.latents_std[channel] + s.latents_mean[channel]);
            if (s.logvar) logvar[static_cast<size_t>(e)] = static_cast<float>(-3.96 + 0.25 * std::sin(phase));
          }
    }
    writer.append({.latents = Tensor::from_vector<float>(latents, {n, c, h, w}),
                   .latents_logvar = s.logvar ? Tensor::from_vector<float>(logvar, {n, c, h, w}) : Tensor(),
                   .text_embeds = Tensor::from_vector<float>(embeds, {n, s.text_length, s.text_dim}),
                   .text_pooled = Tensor::from_vector<float>(pooled, {n, s.pooled_dim}),
                   .text_mask = Tensor::from_vector<uint8_t>(mask, {n, s.text_length}),
                   .captions = captions,
                   .original_size = s.sizes ? Tensor::from_vector<int64_t>(original_size, {n, 2}) : Tensor(),
                   .crop = s.sizes ? Tensor::from_vector<int64_t>(crop, {n, 2}) : Tensor()});
  }
  writer.close();
}

}  // namespace wick::testing
