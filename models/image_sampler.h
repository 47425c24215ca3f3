// Turning prompts into images with a trained model: what an architecture hands `wick train`'s sample
// grids and `wick sample` (Architecture::make_sampler), with everything it needs beyond the denoiser
// (a text encoder, a VAE decoder) found, checked and held.
//
//   std::unique_ptr<ImageSampler> sampler = arch.make_sampler({.config = config, .dataset = *dataset,
//                                                              .device = device});   // Config errors here
//   Tensor images = sampler->generate(*model, {"a photo of a cat", "a red cube"},
//                                     {.steps = 20, .guidance = 3.5, .seed = 42});  // f32 [2, 3, H, W] in [0, 1]
//
// Image i of a call starts from the noise derive_stream(seed, i, 0, RngPurpose::Noise), so it is the same
// image whatever the number of prompts after it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/config/train_config.h"
#include "engine/data/latent_dataset.h"
#include "runtime/device.h"
#include "runtime/tensor.h"

namespace wick {

class DiffusionModel;

// One call's choices; the sample section's values unless a command line overrides them.
struct SampleSettings {
  int64_t steps = 20;     // >= 1
  double guidance = 4.0;  // >= 0: classifier-free scale (1 = none), or Flux dev's guidance input
  uint64_t seed = 42;
  int64_t width = 0, height = 0;  // pixels; 0 = the dataset's first bucket (architectures that choose sizes)
};

class ImageSampler {
 public:
  virtual ~ImageSampler() = default;
  // prompts ("[trigger]" replaced by the config's trigger_word; "" allowed) -> images f32 [N, C, H, W] on the
  // CPU in [0, 1] (C = 1 or 3). `model` is the run's model (base + adapters), in evaluation mode for the call
  // and given back its training flag; no autograd graph is recorded.
  virtual Tensor generate(DiffusionModel& model, const std::vector<std::string>& prompts,
                          const SampleSettings& settings) = 0;
  // One line for the logs: what makes the images ("hashed captions, pixel-packed latents", "Flux VAE ...").
  virtual std::string describe() const = 0;
};

// What an architecture's make_sampler gets: the run's config (sample section, model keys, trigger word),
// its dataset (latent sizes, normalization, how its captions were encoded) and the device to sample on.
struct SamplerRequest {
  const TrainConfig& config;
  const LatentDataset& dataset;
  Device device = Device::cpu();
};

// The sample settings of a config's sample section.
inline SampleSettings sample_settings(const SampleConfig& sample) {
  return {.steps = sample.steps, .guidance = sample.guidance, .seed = static_cast<uint64_t>(sample.seed),
          .width = sample.width, .height = sample.height};
}

}  // namespace wick
