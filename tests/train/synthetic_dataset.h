// A small structured cached-latent dataset for training tests: three classes of 4-channel latents
// (class k is a stripe pattern of frequency k + 1 plus a little per-sample noise), captions by class
// name with the hashed word encoder (L = 8, D = 16), labels. Deterministic (Philox).
//
//   write_synthetic_dataset(dir + "/synthetic.h5", {.n_samples = 96});
//   write_synthetic_dataset(dir + "/nan.h5", {.n_samples = 32, .nan_sample = 5});   // NaN in sample 5
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "engine/data/hashed_text_encoder.h"
#include "engine/data/latent_dataset.h"
#include "runtime/philox.h"

namespace wick::testing {

struct SyntheticDatasetOptions {
  int64_t n_samples = 96;
  int64_t size = 8;          // latents [4, size, size]
  int64_t nan_sample = -1;   // >= 0: that sample's first latent is NaN
  uint64_t seed = 1;
};

inline const std::vector<std::string>& synthetic_class_names() {
  static const std::vector<std::string> names = {"wide stripes", "narrow stripes", "fine stripes"};
  return names;
}

inline void write_synthetic_dataset(const std::string& path, const SyntheticDatasetOptions& o = {}) {
  const int64_t n = o.n_samples, s = o.size, c = 4;
  std::vector<float> latents(static_cast<size_t>(n * c * s * s));
  std::vector<int64_t> labels(static_cast<size_t>(n));
  std::vector<std::string> captions;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = i % 3;
    labels[i] = k;
    captions.push_back(synthetic_class_names()[k]);
    RngStream noise = derive_stream(o.seed, static_cast<uint64_t>(i), 0, RngPurpose::Test);
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t y = 0; y < s; ++y)
        for (int64_t x = 0; x < s; ++x) {
          const int64_t e = ((i * c + ch) * s + y) * s + x;
          const double phase = 3.14159265358979 * static_cast<double>((k + 1) * (ch % 2 == 0 ? x : y)) / 4.0;
          latents[e] = static_cast<float>(0.8 * std::cos(phase) + 0.05 * stream_normal(noise, static_cast<uint64_t>(e)));
        }
  }
  if (o.nan_sample >= 0) latents[static_cast<size_t>(o.nan_sample * c * s * s)] = std::numeric_limits<float>::quiet_NaN();
  HashedTextEncoder encoder(8, 16);
  TextEncoding text = encoder.encode(captions);
  LatentSamples samples{.latents = Tensor::from_vector<float>(latents, {n, c, s, s}),
                        .text_embeds = text.embeds,
                        .text_pooled = text.pooled,
                        .text_mask = text.mask,
                        .captions = captions,
                        .labels = Tensor::from_vector<int64_t>(labels, {n})};
  LatentDatasetWriter writer(path, {.model_family = "fashion-dit", .latent_channels = c,
                                    .text_encoder = HashedTextEncoder::name,
                                    .label_names = synthetic_class_names()});
  writer.append(samples);
  writer.close();
}

}  // namespace wick::testing
